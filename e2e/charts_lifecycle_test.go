//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestTheJobResultFinalizerOnlyWhereJobGCReleasesIt (#32 item 2): the per-service run-controller
// chart makes its operator choose whether Jobs carry the job-result finalizer (no default: it
// refuses to render without the choice, saying what to choose); the agentplane chart puts it on
// only when it installs job-gc, unless run-controller's own block says otherwise; job-gc's chart
// releases every hold before it goes (a pre-delete hook running its own image) and alerts on
// overdue holds.
func TestTheJobResultFinalizerOnlyWhereJobGCReleasesIt(t *testing.T) {
	h := newHelmEnv(t)
	const name = "JANGAR_AGENT_RUNNER_JOB_FINALIZER_ENABLED"

	t.Run("run-controller alone: the operator chooses", func(t *testing.T) {
		wantRefused(t, h, "run-controller", "set controller.jobResultFinalizer: true when job-gc is installed", "--set", "controller.jobResultFinalizer=null")
		for _, v := range []string{"true", "false"} {
			if got, _ := envOf(t, h.template(t, "run-controller", "--set", "controller.jobResultFinalizer="+v), name); got != v {
				t.Errorf("controller.jobResultFinalizer=%s: %s=%q", v, name, got)
			}
			// Without job-gc, run-controller releases holds an earlier install left (#32 item 8):
			// it may patch Jobs then, and only then.
			patch := false
			for _, o := range objects(t, h, "run-controller", "--set", "controller.jobResultFinalizer="+v) {
				if o["kind"] != "Role" {
					continue
				}
				for _, r := range at(o, "rules").([]any) {
					rule := r.(map[string]any)
					if fmt.Sprint(rule["resources"]) == "[jobs]" && strings.Contains(fmt.Sprint(rule["verbs"]), "patch") {
						patch = true
					}
				}
			}
			if patch != (v == "false") {
				t.Errorf("controller.jobResultFinalizer=%s: run-controller may patch Jobs: %v", v, patch)
			}
		}
	})

	t.Run("one release: on exactly when job-gc is installed", func(t *testing.T) {
		// Without job-gc in the release the operator chooses, as with run-controller alone.
		wantRefused(t, h, "agentplane", "set run-controller.controller.jobResultFinalizer=false", append(umbrellaRedis, "--set", "job-gc.enabled=false")...)
		for _, tc := range []struct {
			flags []string
			want  string
		}{
			{nil, "true"},
			{[]string{"--set", "job-gc.enabled=false", "--set", "run-controller.controller.jobResultFinalizer=false"}, "false"},
			{[]string{"--set", "job-gc.enabled=false", "--set", "run-controller.controller.jobResultFinalizer=true"}, "true"},
			{[]string{"--set", "run-controller.controller.jobResultFinalizer=false"}, "false"},
		} {
			objs := umbrellaObjects(t, h, "agentplane", append(slices.Clone(umbrellaRedis), tc.flags...)...)
			if got := containerEnv(t, objs, "agentplane-run-controller")[name]; got != tc.want {
				t.Errorf("%v: %s=%q, want %q", tc.flags, name, got, tc.want)
			}
			_, hook := objs["Job/agentplane-job-gc-release-holds"]
			if jobGC := !strings.Contains(strings.Join(tc.flags, " "), "job-gc.enabled=false"); hook != jobGC {
				t.Errorf("%v: job-gc's release-holds hook rendered %v, want %v", tc.flags, hook, jobGC)
			}
		}
	})

	t.Run("job-gc releases its holds before it goes", func(t *testing.T) {
		objs := objects(t, h, "job-gc", "--set", "controller.namespaces={a,b}", "--set", "image.registry=registry.example.com")
		var hook map[string]any
		for _, o := range objs {
			if o["kind"] == "Job" {
				hook = o
			}
		}
		if hook == nil {
			t.Fatal("no hook Job rendered")
		}
		if got := at(hook, "metadata", "annotations", "helm.sh/hook"); got != "pre-delete" {
			t.Errorf("hook %v, want pre-delete", got)
		}
		c := at(hook, "spec", "template", "spec", "containers", "0").(map[string]any)
		if args := at(c, "args"); len(args.([]any)) != 1 || args.([]any)[0] != "release-holds" {
			t.Errorf("args %v, want [release-holds]", args)
		}
		if img := c["image"].(string); !strings.HasPrefix(img, "registry.example.com/agentplane/job-gc:") {
			t.Errorf("image %s, want job-gc's own", img)
		}
		if env := at(c, "env", "0", "value"); env != "a,b" {
			t.Errorf("JANGAR_AGENTS_CONTROLLER_NAMESPACES=%v, want a,b (the served namespaces)", env)
		}
		if sa := at(hook, "spec", "template", "spec", "serviceAccountName"); sa != "job-gc" {
			t.Errorf("serviceAccountName %v, want job-gc's", sa)
		}
		for _, o := range objects(t, h, "job-gc", "--set", "releaseHoldsOnUninstall=false") {
			if o["kind"] == "Job" {
				t.Errorf("releaseHoldsOnUninstall=false still renders the hook")
			}
		}
		alerts, _ := alertMetrics(t, h, "job-gc")
		if _, ok := alerts["AgentplaneJobResultHeld"]; !ok {
			t.Errorf("job-gc's alerts %v lack AgentplaneJobResultHeld", alerts)
		}
	})
}

// TestTheSeedsValuePathsWorkInEveryChart (#32 item 4): each service chart takes the seeds' side
// overlay as the agentplane chart does (controllers.env.vars in the controller-side charts,
// controlPlane.env.vars in watch-gateway's), over env.vars, and each such variable reaches the
// container; the seeds' values agentplane cannot honour are refused, by the service charts and by
// the agentplane chart, with why: grpc.enabled=false, JANGAR_PRIMITIVES_NAMESPACES,
// orchestrationController.enabled=false or .namespaces, supportingController.enabled=true. Their
// harmless forms (grpc.enabled=true, orchestrationController.enabled=true,
// supportingController.enabled=false) are accepted.
func TestTheSeedsValuePathsWorkInEveryChart(t *testing.T) {
	h := newHelmEnv(t)
	redis := []string{"--set", "redis.url=redis://redis:6379/0"}
	for _, sc := range serviceCharts {
		side := "controllers"
		if sc.name == "watch-gateway" {
			side = "controlPlane"
		}
		redis := redis
		if sc.name != "event-emitter" && sc.name != "watch-gateway" {
			redis = nil
		}
		t.Run(sc.name, func(t *testing.T) {
			objs := h.template(t, sc.name, append(redis, "--set", "env.vars.JANGAR_KUBE_API_QPS=11", "--set", "env.vars.JANGAR_KUBE_API_BURST=22",
				"--set", side+".env.vars.JANGAR_KUBE_API_BURST=33", "--set", side+".env.vars.JANGAR_SHUTDOWN_TIMEOUT=7s", "--set", "grpc.enabled=true")...)
			for name, want := range map[string]string{"JANGAR_KUBE_API_QPS": "11", "JANGAR_KUBE_API_BURST": "33", "JANGAR_SHUTDOWN_TIMEOUT": "7s"} {
				if got, _ := envOf(t, objs, name); got != want {
					t.Errorf("%s=%q, want %q (%s.env.vars over env.vars)", name, got, want, side)
				}
			}
			wantRefused(t, h, sc.name, "agentplane's services always serve gRPC", append(redis, "--set", "grpc.enabled=false")...)
			wantRefused(t, h, sc.name, "supporting-primitives controller", append(redis, "--set", side+".env.vars.JANGAR_PRIMITIVES_NAMESPACES=agents")...)
		})
	}
	t.Run("run-controller: the seeds' controller blocks", func(t *testing.T) {
		h.template(t, "run-controller", "--set", "orchestrationController.enabled=true", "--set", "supportingController.enabled=false")
		wantRefused(t, h, "run-controller", "reconciled by run-controller itself", "--set", "orchestrationController.enabled=false")
		wantRefused(t, h, "run-controller", "in controller.namespaces; set that instead", "--set", "orchestrationController.namespaces={agents}")
		wantRefused(t, h, "run-controller", "no supporting-primitives controller", "--set", "supportingController.enabled=true")
	})
	t.Run("the agentplane chart", func(t *testing.T) {
		umbrellaObjects(t, h, "agentplane", append(slices.Clone(umbrellaRedis), "--set", "run-controller.grpc.enabled=true", "--set", "run-controller.orchestrationController.enabled=true",
			"--set", "run-controller.supportingController.enabled=false")...)
		for flags, why := range map[string]string{
			"run-controller.grpc.enabled=false":                               "always serve gRPC",
			"run-controller.orchestrationController.enabled=false":            "reconciled by run-controller itself",
			"run-controller.supportingController.enabled=true":                "no supporting-primitives controller",
			"global.controllers.env.vars.JANGAR_PRIMITIVES_NAMESPACES=agents": "supporting-primitives controller",
		} {
			args := append([]string{"template", "agentplane", "charts/agentplane", "--namespace", chartNamespace, "--kube-version", renderKubeVersion, "--set", flags}, umbrellaRedis...)
			if _, stderr, err := h.run(args...); err == nil || !strings.Contains(stderr, why) {
				t.Errorf("--set %s: %v, want a refusal saying %q:\n%s", flags, err, why, stderr)
			}
		}
	})
}
