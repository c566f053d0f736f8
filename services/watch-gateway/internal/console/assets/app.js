// agentplane console: plain JavaScript, no build step, no inline script (the page's CSP forbids it).
// Health and runs come from the gateway's SSE streams (snapshot, then deltas; EventSource resumes
// with Last-Event-ID); a run's details, the session and Cancel from /console/api/.
"use strict";

(() => {
  const STATUS_STREAM = "/api/agents/control-plane/status/stream";
  const RUNS_STREAM = "/api/agents/runs/stream";
  const HISTORY = "/api/agents/control-plane/status/history";
  const ARCHIVE = "/api/agents/runs/archive";
  const TERMINAL = new Set(["Succeeded", "Failed", "Cancelled"]);
  const SVG = "http://www.w3.org/2000/svg";

  const $ = (id) => document.getElementById(id);
  const state = {
    session: null,
    components: new Map(), // component -> item
    componentRows: new Map(), // component -> <tr>
    runs: new Map(), // key -> item
    runRows: new Map(), // key -> <tr>
    order: [], // run keys, newest first
    ticking: new Set(), // keys of runs whose duration moves
    view: null,
    runKey: null, // the run page's run
    detail: null,
    streams: [],
  };
  // What the tests and the benchmark read: rows (re)built by the runs table, renders, and the
  // script time of the last snapshot and delta (performance.now(), milliseconds; snapshotAt is
  // when the first snapshot was on the page, from the navigation's start).
  const stats = { rowRenders: 0, fullRenders: 0, deltas: 0, snapshotAt: 0, lastSnapshotMs: 0, lastDeltaMs: 0 };
  window.agentplaneConsole = { stats, state };

  // ---- small helpers ----
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    if (attrs) for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }
  function when(iso) {
    if (!iso) return "";
    const d = new Date(iso);
    return isNaN(d) ? "" : d.toLocaleString();
  }
  // since is a <time> that says how long ago iso was, kept current by the page's one-second tick.
  function since(iso) { return el("time", { class: "ago", datetime: iso || "", text: ago(iso) }); }
  function ago(iso) {
    if (!iso) return "";
    const s = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
    return s < 60 ? s + "s ago" : s < 3600 ? Math.round(s / 60) + "m ago" : Math.round(s / 3600) + "h ago";
  }
  function duration(d) {
    if (!d || !d.started) return "";
    const end = d.finished ? new Date(d.finished) : new Date();
    let s = Math.max(0, Math.round((end - new Date(d.started)) / 1000));
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    return (h ? h + "h" : "") + (h || m ? m + "m" : "") + s + "s";
  }
  function setText(node, text) { if (node.textContent !== text) node.textContent = text; }
  function setClass(node, cls) { if (node.className !== cls) node.className = cls; }
  function banner(msg) {
    setText($("banner-text"), msg);
    $("banner").hidden = !msg;
  }
  $("banner-close").addEventListener("click", () => banner(""));

  async function api(path, opts = {}) {
    const headers = { Accept: "application/json", ...(opts.headers || {}) };
    if (opts.method && opts.method !== "GET" && state.session && state.session.csrf) headers["X-CSRF-Token"] = state.session.csrf;
    if (opts.body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(path, { method: opts.method || "GET", headers, credentials: "same-origin", cache: "no-store",
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
    let data = null;
    const text = await res.text();
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = { error: text.trim() }; }
    if (!res.ok) {
      const err = new Error((data && data.error) || res.status + " " + res.statusText);
      err.status = res.status;
      throw err;
    }
    return data;
  }

  // ---- streams ----
  // follow opens an EventSource on url and keeps it open: the browser resumes with Last-Event-ID
  // after a dropped connection; after a refused one (the browser gives up) it reopens with the
  // last cursor as ?since=.
  function follow(url, handlers, stateNode) {
    let es = null, last = "", closed = false, retry = null;
    const show = (s) => { setText(stateNode, s); setClass(stateNode, "state " + (s === "live" ? "state-live" : s === "connecting" ? "" : "state-down")); };
    const open = () => {
      retry = null;
      es = new EventSource(last ? url + (url.includes("?") ? "&" : "?") + "since=" + encodeURIComponent(last) : url);
      const on = (type, fn) => es.addEventListener(type, (ev) => {
        if (ev.lastEventId) last = ev.lastEventId;
        let data = null;
        try { data = JSON.parse(ev.data); } catch (e) { return; }
        fn(data);
      });
      es.onopen = () => show("live");
      on("snapshot", (d) => { handlers.snapshot(d); show("live"); });
      on("delta", (d) => handlers.delta(d));
      on("heartbeat", (d) => handlers.heartbeat && handlers.heartbeat(d));
      // An "error" event from the gateway carries a message; the browser's own "error" (a lost
      // connection) carries no data.
      es.addEventListener("error", (ev) => {
        if (ev.data) {
          try { banner(JSON.parse(ev.data).message || ""); } catch (e) { /* not JSON */ }
          return;
        }
        if (closed) return;
        show("reconnecting");
        if (es.readyState === EventSource.CLOSED) {
          // Refused (the session ended, access was taken away, the gateway restarts): ask who we
          // are before trying again.
          es.close();
          if (!retry) retry = setTimeout(async () => {
            retry = null;
            try {
              const s = await api("/console/api/session");
              if (state.session && state.session.mode === "token" && !s.signed_in) { showSignIn("The session ended; sign in again."); return; }
            } catch (e) { /* the gateway is away: try again */ }
            if (!closed) open();
          }, 2000);
        }
      });
    };
    open();
    const handle = { close: () => { closed = true; if (retry) clearTimeout(retry); if (es) es.close(); } };
    state.streams.push(handle);
    return handle;
  }

  // ---- health ----
  function componentRow(it) {
    let tr = state.componentRows.get(it.component);
    if (!tr) {
      tr = el("tr", { "data-component": it.component }, el("td", { class: "name", text: it.component }), el("td", { class: "status-cell" }), el("td", { class: "message" }));
      state.componentRows.set(it.component, tr);
    }
    const st = tr.children[1];
    setClass(st, "status-cell status status-" + it.status);
    setText(st, it.status);
    setText(tr.children[2], it.message || "");
    return tr;
  }
  const health = {
    snapshot(d) {
      state.components = new Map((d.items || []).map((it) => [it.component, it]));
      const body = $("components").tBodies[0];
      const frag = document.createDocumentFragment();
      for (const it of d.items || []) frag.append(componentRow(it));
      for (const [c, tr] of state.componentRows) if (!state.components.has(c)) { tr.remove(); state.componentRows.delete(c); }
      body.replaceChildren(frag);
      onHealthChange();
    },
    delta(d) {
      const body = $("components").tBodies[0];
      for (const it of d.changes || []) {
        const isNew = !state.componentRows.has(it.component);
        state.components.set(it.component, it);
        const tr = componentRow(it);
        if (isNew) body.append(tr);
      }
      onHealthChange();
    },
    heartbeat(d) {
      const t = $("heartbeat");
      t.setAttribute("datetime", d.generated_at);
      setText(t, new Date(d.generated_at).toLocaleTimeString());
    },
  };
  let historyTimer = null;
  function onHealthChange() {
    if (state.view === "history") {
      clearTimeout(historyTimer);
      if (state.session && state.session.history) historyTimer = setTimeout(loadHistory, 1000);
    }
  }

  // ---- runs ----
  function cmpRuns(a, b) {
    const x = state.runs.get(a), y = state.runs.get(b);
    const ca = (x && x.details && x.details.created) || "", cb = (y && y.details && y.details.created) || "";
    if (ca !== cb) return ca < cb ? 1 : -1;
    return a < b ? -1 : a > b ? 1 : 0;
  }
  function runLink(kind, name) { return "#/run/" + encodeURIComponent(kind) + "/" + encodeURIComponent(name); }
  // runRow builds or updates one row; only the cells whose text changed are touched.
  function runRow(it) {
    const d = it.details || {};
    let tr = state.runRows.get(it.component);
    if (!tr) {
      tr = el("tr", { "data-key": it.component },
        el("td", { class: "kind", text: d.kind || "" }),
        el("td", { class: "name" }, el("a", { href: runLink(d.kind, d.name), text: d.name || "" })),
        el("td", { class: "phase-cell" }), el("td", { class: "agent" }), el("td", { class: "started" }),
        el("td", { class: "duration num" }), el("td", { class: "reason" }));
      state.runRows.set(it.component, tr);
    }
    stats.rowRenders++;
    const c = tr.children;
    setClass(c[2], "phase-cell phase phase-" + it.status);
    setText(c[2], it.status);
    setText(c[3], d.agent || d.orchestration || "");
    setText(c[4], when(d.started));
    setText(c[5], duration(d));
    setText(c[6], d.reason || "");
    if (d.started && !d.finished) state.ticking.add(it.component); else state.ticking.delete(it.component);
    return tr;
  }
  function renderAllRuns() {
    stats.fullRenders++;
    state.order = [...state.runs.keys()].sort(cmpRuns);
    const frag = document.createDocumentFragment();
    for (const k of state.order) frag.append(runRow(state.runs.get(k)));
    for (const [k, tr] of state.runRows) if (!state.runs.has(k)) { tr.remove(); state.runRows.delete(k); state.ticking.delete(k); }
    $("runs").tBodies[0].replaceChildren(frag);
    setText($("runs-count"), state.runs.size === 1 ? "1 run" : state.runs.size + " runs");
  }
  // insertAt finds where key goes in the newest-first order (binary search).
  function insertAt(key) {
    let lo = 0, hi = state.order.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cmpRuns(state.order[mid], key) < 0) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
  const runsHandlers = {
    snapshot(d) {
      const t0 = performance.now();
      state.runs = new Map((d.items || []).map((it) => [it.component, it]));
      renderAllRuns();
      onRunChanged(null);
      const t1 = performance.now();
      stats.lastSnapshotMs = t1 - t0;
      if (!stats.snapshotAt) stats.snapshotAt = t1;
    },
    // A delta touches only its runs' rows: changed rows are updated in place, new rows are
    // inserted where they sort, removed rows leave.
    delta(d) {
      const t0 = performance.now();
      stats.deltas++;
      const body = $("runs").tBodies[0];
      for (const it of d.changes || []) {
        const isNew = !state.runs.has(it.component);
        state.runs.set(it.component, it);
        const tr = runRow(it);
        if (isNew) {
          const i = insertAt(it.component);
          state.order.splice(i, 0, it.component);
          const next = state.order[i + 1];
          body.insertBefore(tr, next ? state.runRows.get(next) : null);
        }
        onRunChanged(it.component);
      }
      for (const k of d.removed || []) {
        state.runs.delete(k);
        const tr = state.runRows.get(k);
        if (tr) tr.remove();
        state.runRows.delete(k);
        state.ticking.delete(k);
        const i = state.order.indexOf(k);
        if (i >= 0) state.order.splice(i, 1);
        onRunChanged(k);
      }
      setText($("runs-count"), state.runs.size === 1 ? "1 run" : state.runs.size + " runs");
      stats.lastDeltaMs = performance.now() - t0;
    },
  };
  // rebuildRuns builds every row anew, as a page that re-rendered the whole table on each change
  // would: the benchmark's baseline for a delta's cost. It returns its script time.
  window.agentplaneConsole.rebuildRuns = () => {
    const t0 = performance.now();
    for (const tr of state.runRows.values()) tr.remove();
    state.runRows.clear();
    renderAllRuns();
    return performance.now() - t0;
  };
  setInterval(() => {
    for (const k of state.ticking) {
      const tr = state.runRows.get(k), it = state.runs.get(k);
      if (tr && it) setText(tr.children[5], duration(it.details));
    }
    if (state.view === "run" && state.runKey) {
      const it = state.runs.get(state.runKey);
      const dd = document.querySelector("#run-facts dd[data-fact=duration]");
      if (it && dd) setText(dd, duration(it.details));
      for (const t of document.querySelectorAll("#view-run time.ago")) setText(t, ago(t.getAttribute("datetime")));
    }
  }, 1000);

  // ---- a run's page ----
  let detailTimer = null;
  function onRunChanged(key) {
    if (state.view !== "run" || !state.runKey) return;
    if (key !== null && key !== state.runKey) return;
    renderRunHeader();
    clearTimeout(detailTimer);
    detailTimer = setTimeout(loadDetail, 400);
  }
  function renderRunHeader() {
    const it = state.runs.get(state.runKey);
    const [kind, name] = splitKey(state.runKey);
    setText($("run-kind"), kind);
    setText($("run-name"), name);
    const missing = $("run-missing");
    if (!it) {
      missing.hidden = false;
      setText(missing, kind + " " + name + " is not in this namespace (deleted, or not created yet).");
      $("cancel").hidden = true;
      return;
    }
    missing.hidden = true;
    const ph = $("run-phase");
    setClass(ph, "phase phase-" + it.status);
    setText(ph, it.status);
    const d = it.details || {};
    const facts = [
      ["Agent", d.agent || ""], ["Orchestration", d.orchestration || ""], ["Runtime", d.runtime || ""],
      ["Part of", d.orchestration_run ? d.orchestration_run + (d.step ? " (step " + d.step + ")" : "") : ""],
      ["Created", when(d.created)], ["Started", when(d.started)], ["Finished", when(d.finished)],
      ["Duration", duration(d)], ["Reason", d.reason || ""], ["Message", it.message || ""],
      ["Cancel", d.cancel ? "requested" : ""],
    ];
    const dl = $("run-facts");
    const frag = document.createDocumentFragment();
    for (const [k, v] of facts) {
      if (!v && k !== "Duration") continue;
      let dd;
      if (k === "Part of") dd = el("dd", null, el("a", { href: runLink("OrchestrationRun", d.orchestration_run), text: v }));
      else dd = el("dd", { text: v });
      if (k === "Duration") dd.setAttribute("data-fact", "duration");
      frag.append(el("dt", { text: k }), dd);
    }
    dl.replaceChildren(frag);
    // The graph's colours follow the stream at once; its shape comes with the details.
    if (d.kind === "OrchestrationRun" && state.detail && state.detail.steps) {
      const phases = new Map((d.steps || []).map((s) => [s.name, s]));
      for (const s of state.detail.steps) {
        const p = phases.get(s.name);
        if (p) { s.phase = p.phase || "Pending"; if (p.run) s.run = p.run; }
      }
      renderGraph(state.detail.steps);
    }
    updateCancel();
  }
  function updateCancel() {
    const it = state.runs.get(state.runKey);
    const btn = $("cancel");
    const can = !!(state.detail && state.detail.can_cancel && it && !TERMINAL.has(it.status) && !(it.details && it.details.cancel));
    btn.hidden = !can;
    if (it && it.details && it.details.cancel && !TERMINAL.has(it.status)) setText($("cancel-state"), "cancel requested");
    else if (it && TERMINAL.has(it.status)) setText($("cancel-state"), "");
  }
  function splitKey(key) {
    const i = key.indexOf("/");
    return [key.slice(0, i), key.slice(i + 1)];
  }
  async function loadDetail() {
    if (state.view !== "run" || !state.runKey) return;
    const key = state.runKey;
    const [kind, name] = splitKey(key);
    let d;
    try {
      d = await api("/console/api/runs/" + encodeURIComponent(kind) + "/" + encodeURIComponent(name));
    } catch (e) {
      if (key !== state.runKey) return;
      if (e.status === 404) { state.detail = null; renderRunHeader(); return; }
      if (e.status === 401) { showSignIn(); return; }
      banner(e.message);
      return;
    }
    if (key !== state.runKey) return;
    state.detail = d;
    fillTable($("run-conditions"), d.conditions, (c) => [c.type, el("span", { class: "status " + (c.status === "True" ? "status-healthy" : c.status === "False" ? "status-error" : "status-unknown"), text: c.status }),
      c.reason || "", c.message || "", since(c.last_transition_time)]);
    $("run-jobs-box").hidden = d.kind !== "AgentRun";
    fillTable($("run-jobs"), d.jobs, (j) => [j.name + (j.deleting ? " (being deleted)" : ""), String(j.active), String(j.succeeded), String(j.failed),
      when(j.start), when(j.completion), (j.conditions || []).map((c) => c.type + (c.reason ? " (" + c.reason + ")" : "")).join(", ")]);
    fillTable($("run-events"), d.events, (e) => [el("span", { class: e.type === "Warning" ? "error" : "", text: e.type }), e.reason, e.message, String(e.count), since(e.last), e.reporter || ""]);
    const probs = $("run-problems");
    probs.hidden = !(d.problems && d.problems.length);
    setText(probs, (d.problems || []).join(" "));
    $("run-graph-box").hidden = !d.steps;
    if (d.steps) renderGraph(d.steps);
    renderRunHeader();
  }
  function fillTable(table, rows, cells, empty) {
    const frag = document.createDocumentFragment();
    for (const r of rows || []) frag.append(el("tr", null, ...cells(r).map((c) => el("td", null, c))));
    if (!rows || rows.length === 0) frag.append(el("tr", null, el("td", { class: "meta", colspan: String(table.tHead.rows[0].cells.length), text: empty || "none" })));
    table.tBodies[0].replaceChildren(frag);
  }

  // renderGraph lays the steps out in columns by depth (the longest dependsOn chain before each)
  // and draws an arrow per dependency; each step's colour is its phase's.
  function renderGraph(steps) {
    const g = $("run-graph");
    const byName = new Map(steps.map((s) => [s.name, s]));
    const depth = new Map();
    const depthOf = (n, seen) => {
      if (depth.has(n)) return depth.get(n);
      if (seen.has(n)) return 0; // a cycle: the controller refuses it; draw what there is
      seen.add(n);
      const s = byName.get(n);
      let d = 0;
      for (const p of (s && s.depends_on) || []) if (byName.has(p)) d = Math.max(d, depthOf(p, seen) + 1);
      depth.set(n, d);
      return d;
    };
    const cols = [];
    for (const s of steps) {
      const d = depthOf(s.name, new Set());
      (cols[d] = cols[d] || []).push(s);
    }
    const W = 150, H = 46, GX = 60, GY = 18, PAD = 10;
    const pos = new Map();
    cols.forEach((col, x) => col.forEach((s, y) => pos.set(s.name, { x: PAD + x * (W + GX), y: PAD + y * (H + GY) })));
    const rows = Math.max(1, ...cols.map((c) => c.length));
    g.setAttribute("width", String(PAD * 2 + cols.length * W + Math.max(0, cols.length - 1) * GX));
    g.setAttribute("height", String(PAD * 2 + rows * H + (rows - 1) * GY));
    const frag = document.createDocumentFragment();
    const defs = svg("defs");
    const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" });
    marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }));
    defs.append(marker);
    frag.append(defs);
    for (const s of steps) {
      for (const p of s.depends_on || []) {
        const a = pos.get(p), b = pos.get(s.name);
        if (!a || !b) continue;
        const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
        frag.append(svg("path", { class: "edge", d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, "marker-end": "url(#arrow)", "data-edge": p + "->" + s.name }));
      }
    }
    for (const s of steps) {
      const p = pos.get(s.name);
      const node = svg("g", { class: "step phase-" + (s.phase || "Pending"), "data-step": s.name, "data-phase": s.phase || "Pending", transform: `translate(${p.x},${p.y})` });
      node.append(svg("rect", { width: String(W), height: String(H) }));
      const t1 = svg("text", { x: String(W / 2), y: String(H / 2 - 8) }); t1.textContent = s.name;
      const t2 = svg("text", { x: String(W / 2), y: String(H / 2 + 10), class: "phase-label" }); t2.textContent = s.phase || "Pending";
      node.append(t1, t2);
      if (s.run) {
        const a = svg("a", { href: runLink("AgentRun", s.run) });
        a.append(node);
        frag.append(a);
      } else {
        frag.append(node);
      }
    }
    g.replaceChildren(frag);
  }

  $("cancel").addEventListener("click", async () => {
    const btn = $("cancel");
    const [kind, name] = splitKey(state.runKey);
    btn.disabled = true;
    setText($("cancel-state"), "cancelling…");
    try {
      await api("/console/api/runs/" + encodeURIComponent(kind) + "/" + encodeURIComponent(name) + "/cancel", { method: "POST", body: {} });
      setText($("cancel-state"), "cancel requested");
      btn.hidden = true;
    } catch (e) {
      setText($("cancel-state"), "");
      banner("Cancel refused: " + e.message);
    } finally {
      btn.disabled = false;
    }
  });

  // ---- history ----
  async function loadHistory() {
    const since = $("history-since").value;
    let h;
    try {
      h = await api(HISTORY + "?since=" + encodeURIComponent(since));
    } catch (e) {
      setText($("history-state"), e.message);
      return;
    }
    setText($("history-state"), h.transitions.length + " transitions" + (h.truncated ? " (older ones left out)" : "") + " · kept " + h.retention);
    const rows = [...h.transitions].reverse();
    fillTable($("history"), rows, (t) => [when(t.at), t.component,
      el("span", null, el("span", { class: "status status-" + (t.previous || "unknown"), text: t.previous || "—" }), " → ", el("span", { class: "status status-" + t.status, text: t.status })),
      t.message || ""]);
    renderTimeline(h.transitions, parseDuration(since), h.oldest ? new Date(h.oldest).getTime() : Date.now());
  }
  function parseDuration(s) {
    const m = /^(\d+)(m|h)$/.exec(s);
    return m ? Number(m[1]) * (m[2] === "h" ? 3600e3 : 60e3) : 3600e3;
  }
  // renderTimeline draws one lane per component: its status from each transition to the next.
  // Nothing is drawn before the oldest transition the gateway kept (recordedFrom): the timeline
  // knows nothing about that time.
  function renderTimeline(transitions, windowMs, recordedFrom) {
    const g = $("timeline");
    const now = Date.now(), from = now - windowMs;
    const lanes = new Map();
    for (const t of transitions) {
      if (!lanes.has(t.component)) lanes.set(t.component, []);
      lanes.get(t.component).push(t);
    }
    for (const c of state.components.keys()) if (!lanes.has(c)) lanes.set(c, []);
    const names = [...lanes.keys()].sort();
    const LW = 190, LH = 20, W = Math.max(600, g.clientWidth || 900), TOP = 22;
    g.setAttribute("height", String(TOP + names.length * (LH + 4) + 4));
    g.setAttribute("viewBox", `0 0 ${W} ${TOP + names.length * (LH + 4) + 4}`);
    const x = (ms) => LW + ((ms - from) / windowMs) * (W - LW - 8);
    const frag = document.createDocumentFragment();
    for (let i = 0; i <= 4; i++) {
      const ms = from + (windowMs * i) / 4, xx = x(ms);
      frag.append(svg("line", { class: "tick", x1: String(xx), y1: "14", x2: String(xx), y2: String(TOP + names.length * (LH + 4)) }));
      const label = svg("text", { class: "axis", x: String(xx), y: "10", "text-anchor": i === 4 ? "end" : i === 0 ? "start" : "middle" });
      label.textContent = new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
      frag.append(label);
    }
    names.forEach((c, i) => {
      const y = TOP + i * (LH + 4);
      const label = svg("text", { class: "lane-label", x: "0", y: String(y + LH / 2) });
      label.textContent = c;
      frag.append(label);
      const ts = lanes.get(c);
      // Before its first transition in the window a lane shows the status that transition left
      // (none when it was the component's first), and a lane without one its current status,
      // from when the record begins.
      let status = ts.length ? ts[0].previous : ((state.components.get(c) || {}).status || "");
      let start = Math.max(from, recordedFrom);
      const seg = (a, b, s) => {
        if (b <= a || !s) return;
        const r = svg("rect", { class: "seg seg-" + s, x: String(x(a)), y: String(y), width: String(Math.max(1, x(b) - x(a))), height: String(LH), "data-component": c, "data-status": s });
        const title = svg("title");
        title.textContent = c + ": " + s + " from " + new Date(a).toLocaleTimeString();
        r.append(title);
        frag.append(r);
      };
      for (const t of ts) {
        const at = Math.max(from, new Date(t.at).getTime());
        seg(start, at, status);
        status = t.status; start = at;
      }
      seg(start, now, status);
    });
    g.replaceChildren(frag);
  }
  $("history-since").addEventListener("change", loadHistory);

  // ---- the run archive: finished runs that have left the cluster ----
  const archive = { next: "", rows: [] };
  async function loadArchive(more) {
    if (!state.session || !state.session.archive) return;
    const q = new URLSearchParams({ limit: "50" });
    if ($("archive-kind").value) q.set("kind", $("archive-kind").value);
    if ($("archive-phase").value) q.set("phase", $("archive-phase").value);
    if (more && archive.next) q.set("cursor", archive.next);
    let page;
    try {
      page = await api(ARCHIVE + "?" + q.toString());
    } catch (e) {
      if (e.status === 401) { showSignIn(); return; }
      setText($("archive-state"), e.message);
      return;
    }
    archive.rows = more ? archive.rows.concat(page.runs || []) : (page.runs || []);
    archive.next = page.next_cursor || "";
    setText($("archive-state"), archive.rows.length + " shown" + ((page.hidden || []).length ? " · " + page.hidden.join("; ") : ""));
    $("archive-more").hidden = !archive.next;
    fillTable($("archive"), archive.rows, (r) => [r.kind, el("a", { href: "#/archived/" + encodeURIComponent(r.uid), "data-uid": r.uid, text: r.name }),
      el("span", { class: "phase phase-" + r.phase, text: r.phase }), r.agent || "", when(r.finished_at),
      duration({ started: r.created_at, finished: r.finished_at })]);
  }
  $("archive-kind").addEventListener("change", () => loadArchive(false));
  $("archive-phase").addEventListener("change", () => loadArchive(false));
  $("archive-more").addEventListener("click", () => loadArchive(true));

  async function loadArchived(uid) {
    const err = $("archived-error");
    err.hidden = true;
    for (const id of ["archived-conditions", "archived-steps", "archived-jobs", "archived-events"]) $(id).tBodies[0].replaceChildren();
    $("archived-logs").replaceChildren();
    $("archived-facts").replaceChildren();
    let r;
    try {
      r = await api(ARCHIVE + "/" + encodeURIComponent(uid));
    } catch (e) {
      if (e.status === 401) { showSignIn(); return; }
      setText(err, e.message);
      err.hidden = false;
      return;
    }
    const s = r.summary || {};
    const obj = r.object || {};
    const st = obj.status || {};
    setText($("archived-kind"), s.kind || "");
    setText($("archived-name"), s.name || "");
    setText($("archived-phase"), s.phase || "");
    setClass($("archived-phase"), "phase phase-" + (s.phase || ""));
    const facts = [["Namespace", s.namespace], ["UID", s.uid], ["Agent", s.agent], ["Created", when(s.created_at)], ["Finished", when(s.finished_at)],
      ["Duration", duration({ started: s.created_at, finished: s.finished_at })], ["Archived", when(s.archived_at)],
      ["Reason", st.reason], ["Message", st.message]];
    const frag = document.createDocumentFragment();
    for (const [k, v] of facts) if (v) frag.append(el("dt", { text: k }), el("dd", { text: v }));
    $("archived-facts").replaceChildren(frag);
    fillTable($("archived-conditions"), st.conditions || [], (c) => [c.type, el("span", { class: "status " + (c.status === "True" ? "status-healthy" : c.status === "False" ? "status-error" : "status-unknown"), text: c.status }),
      c.reason || "", c.message || "", when(c.lastTransitionTime)]);
    $("archived-steps-box").hidden = !st.stepStatuses;
    fillTable($("archived-steps"), st.stepStatuses || [], (p) => [p.name, p.phase || "Pending", (p.resourceRef && p.resourceRef.name) || ""]);
    // A part the user may not read says so where it would be (the gateway's "hidden" sentences
    // start with the part's name).
    const hiddenPart = (part) => (r.hidden || []).find((h) => h.startsWith(part + " "));
    fillTable($("archived-jobs"), r.jobs || [], (j) => [j.name, j.step || "", j.succeeded ? "Succeeded" : "Failed",
      j.exit_code === undefined ? "" : String(j.exit_code), when(j.started), when(j.finished), j.reason || ""], hiddenPart("jobs"));
    fillTable($("archived-events"), r.events || [], (e) => [el("span", { class: e.type === "Warning" ? "error" : "", text: e.type }), e.reason, e.message,
      String(e.count || 1), when(e.last), e.involved || ""], hiddenPart("events"));
    const logs = document.createDocumentFragment();
    for (const l of r.logs || []) {
      logs.append(el("h3", { text: l.pod + " / " + l.container + (l.truncated ? " (its tail)" : "") }));
      logs.append(l.error ? el("p", { class: "error", text: "not read: " + l.error }) : el("pre", { class: "log", text: l.tail || "" }));
    }
    if (!(r.logs || []).length) logs.append(el("p", { class: "meta", text: hiddenPart("logs") || "none" }));
    $("archived-logs").replaceChildren(logs);
    const rest = (r.hidden || []).filter((h) => !["jobs", "events", "logs"].some((p) => h.startsWith(p + " ")));
    const hid = $("archived-hidden");
    hid.hidden = !rest.length;
    setText(hid, rest.join(" "));
  }

  // ---- views ----
  const VIEWS = ["loading", "signin", "health", "runs", "run", "history", "archived"];
  function show(view) {
    state.view = view;
    for (const v of VIEWS) $("view-" + v).hidden = v !== view;
    for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("current", a.dataset.view === view || (view === "run" && a.dataset.view === "runs") || (view === "archived" && a.dataset.view === "history"));
  }
  function route() {
    if (!state.session || !state.session.signed_in) return;
    const h = location.hash || "#/";
    const m = /^#\/run\/([^/]+)\/(.+)$/.exec(h);
    if (m) {
      const key = decodeURIComponent(m[1]) + "/" + decodeURIComponent(m[2]);
      if (state.runKey !== key) {
        // Another run: nothing of the previous one's details stays on the page while its own load.
        state.detail = null; $("run-graph-box").hidden = true; setText($("cancel-state"), "");
        for (const id of ["run-conditions", "run-jobs", "run-events"]) { const body = $(id).querySelector("tbody"); if (body) body.replaceChildren(); }
      }
      state.runKey = key;
      show("run");
      renderRunHeader();
      loadDetail();
      return;
    }
    state.runKey = null;
    const a = /^#\/archived\/(.+)$/.exec(h);
    if (a) { show("archived"); loadArchived(decodeURIComponent(a[1])); return; }
    if (h.startsWith("#/runs")) show("runs");
    else if (h.startsWith("#/history")) {
      show("history");
      $("history-status-box").hidden = !state.session.history;
      $("archive-box").hidden = !state.session.archive;
      if (state.session.history) loadHistory();
      loadArchive(false);
    }
    else show("health");
  }
  window.addEventListener("hashchange", route);

  function showSignIn(message) {
    for (const s of state.streams) s.close();
    state.streams = [];
    $("nav").hidden = true;
    $("signout").hidden = true;
    setText($("who"), "");
    show("signin");
    const err = $("signin-error");
    err.hidden = !message;
    setText(err, message || "");
    $("token").focus();
  }
  function start() {
    const s = state.session;
    $("nav").hidden = false;
    setText($("namespace"), "namespace " + s.namespace);
    setText($("who"), s.user ? "signed in as " + s.user : "");
    $("signout").hidden = s.mode !== "token";
    $("nav").querySelector("[data-view=history]").hidden = !s.history && !s.archive;
    if (state.streams.length === 0) {
      // A heartbeat every 10 s (the streams' default is 30 s), so the page's "last heartbeat" and
      // its state are fresh.
      follow(STATUS_STREAM + "?heartbeat=10s", health, $("health-state"));
      follow(RUNS_STREAM + "?heartbeat=10s", runsHandlers, $("runs-state"));
    }
    route();
  }
  $("signin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const input = $("token");
    const token = input.value;
    input.value = "";
    try {
      state.session = await api("/console/api/session", { method: "POST", body: { token } });
      $("signin-error").hidden = true;
      start();
    } catch (e) {
      showSignIn(e.message);
    }
  });
  $("signout").addEventListener("click", async () => {
    try { await api("/console/api/session", { method: "DELETE" }); } catch (e) { /* signed out anyway */ }
    state.session = null;
    showSignIn("");
  });

  async function boot() {
    try {
      state.session = await api("/console/api/session");
    } catch (e) {
      show("loading");
      banner("The console cannot reach the gateway: " + e.message);
      setTimeout(boot, 3000);
      return;
    }
    if (!state.session.signed_in) {
      const refused = new URLSearchParams(location.search).get("signin") === "refused";
      showSignIn(refused ? "The token was refused." : "");
      return;
    }
    start();
  }
  boot();
})();
