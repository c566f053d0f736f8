-- The archive of finished runs: one row per run (by UID), its columns what lists filter and sort
-- on, the whole record (the run's final object, its Events, its Jobs' outcomes and its steps'
-- log tails) in one jsonb document.

-- +goose Up
CREATE TABLE runs (
    uid         text        PRIMARY KEY,
    kind        text        NOT NULL,
    namespace   text        NOT NULL,
    name        text        NOT NULL,
    agent       text        NOT NULL DEFAULT '',
    phase       text        NOT NULL,
    created_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now(),
    record      jsonb       NOT NULL
);
-- Each list is newest first by (finished_at, uid), the keyset its cursors carry; one index per
-- filter a list may lead with, so that a page reads only its own rows.
CREATE INDEX runs_newest           ON runs (finished_at DESC, uid DESC);
CREATE INDEX runs_namespace_newest ON runs (namespace, finished_at DESC, uid DESC);
CREATE INDEX runs_agent_newest     ON runs (namespace, agent, finished_at DESC, uid DESC);
CREATE INDEX runs_phase_newest     ON runs (namespace, phase, finished_at DESC, uid DESC);
CREATE INDEX runs_name_newest      ON runs (namespace, name, finished_at DESC, uid DESC);

-- +goose Down
DROP TABLE runs;
