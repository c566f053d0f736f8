// Package archive keeps finished runs in PostgreSQL after they leave the cluster: one row per run
// (by UID) holding its final object, its Events, its Jobs' outcomes and the tails of its steps'
// logs. Writes are idempotent (a retried write stores the same one row), lists are newest first
// with keyset cursors bound to their query, and rows past the archive's own retention are deleted
// in bounded batches.
//
// The schema is versioned (migrations/, applied by goose under a PostgreSQL advisory lock when a
// Store opens, so replicas starting together migrate once). The password is given apart from the
// connection URL (from a Secret) and appears in no error; TLS to the database is the URL's
// sslmode (verify-full with sslrootcert for a CA of one's own).
package archive

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Config says where the archive is.
type Config struct {
	// URL is a PostgreSQL connection URL without its password, e.g.
	// postgres://agentplane@db.example:5432/agentplane?sslmode=verify-full&sslrootcert=/etc/ca.crt
	URL string
	// Password, when set, is used over one in URL (keep it in a Secret, not in the URL).
	Password string
	// MaxConns bounds the pool (0: pgx's default, the larger of 4 and the CPU count).
	MaxConns int32
}

// Store is the archive.
type Store struct {
	pool *pgxpool.Pool
}

// Event is one of a run's Kubernetes Events, as archived (its message already redacted).
type Event struct {
	Type     string    `json:"type"`
	Reason   string    `json:"reason"`
	Message  string    `json:"message"`
	Count    int32     `json:"count,omitempty"`
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
	Source   string    `json:"source,omitempty"`
	Involved string    `json:"involved,omitempty"` // kind/name of the object it is about
}

// JobOutcome is how one of a run's Jobs ended.
type JobOutcome struct {
	Name      string    `json:"name"`
	Step      string    `json:"step,omitempty"`
	Succeeded bool      `json:"succeeded"`
	ExitCode  *int32    `json:"exitCode,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Message   string    `json:"message,omitempty"`
	Started   time.Time `json:"started,omitzero"`
	Finished  time.Time `json:"finished,omitzero"`
}

// StepLog is the tail of one container's log (redacted), or why it could not be read.
type StepLog struct {
	Pod       string `json:"pod"`
	Container string `json:"container"`
	Tail      string `json:"tail,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Summary is what a list shows of a run.
type Summary struct {
	UID        string    `json:"uid"`
	Kind       string    `json:"kind"`
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	Agent      string    `json:"agent,omitempty"`
	Phase      string    `json:"phase"`
	CreatedAt  time.Time `json:"createdAt"`
	FinishedAt time.Time `json:"finishedAt"`
	ArchivedAt time.Time `json:"archivedAt,omitzero"`
}

// Record is a run in full.
type Record struct {
	Summary
	// Object is the run as it was last seen: spec, status, conditions, an OrchestrationRun's steps.
	Object json.RawMessage `json:"object"`
	Events []Event         `json:"events,omitempty"`
	Jobs   []JobOutcome    `json:"jobs,omitempty"`
	Logs   []StepLog       `json:"logs,omitempty"`
}

// body is what the record column holds (the Summary's fields are columns).
type body struct {
	Object json.RawMessage `json:"object"`
	Events []Event         `json:"events,omitempty"`
	Jobs   []JobOutcome    `json:"jobs,omitempty"`
	Logs   []StepLog       `json:"logs,omitempty"`
}

// ErrNotFound: no archived run matches.
var ErrNotFound = errors.New("no archived run matches")

// Open connects to the archive and brings its schema up to date (the writer, job-gc, does).
func Open(ctx context.Context, c Config) (*Store, error) {
	s, pc, err := connect(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("the archive at %s: migrating its schema: %w", where(pc), err)
	}
	return s, nil
}

// OpenReader connects to the archive to read it (watch-gateway) without changing its schema, so
// its database user needs only SELECT. It refuses a schema older than this code reads: job-gc,
// the writer, migrates it when it first reaches the database.
func OpenReader(ctx context.Context, c Config) (*Store, error) {
	s, pc, err := connect(ctx, c)
	if err != nil {
		return nil, err
	}
	have, err := s.SchemaVersion(ctx)
	if err != nil {
		have = 0 // no version table yet: nothing has migrated it
	}
	if want := latestVersion(); have < want {
		s.Close()
		return nil, fmt.Errorf("the archive at %s has schema version %d, this reader needs %d: job-gc creates and migrates it when it first reaches the database (turn its archive on, or upgrade it first)", where(pc), have, want)
	}
	return s, nil
}

// latestVersion is the newest migration this code carries (its files are NNNNN_name.sql).
func latestVersion() int64 {
	entries, _ := fs.ReadDir(migrations, "migrations")
	var v int64
	for _, e := range entries {
		var n int64
		if _, err := fmt.Sscanf(e.Name(), "%d_", &n); err == nil && n > v {
			v = n
		}
	}
	return v
}

func connect(ctx context.Context, c Config) (*Store, *pgxpool.Config, error) {
	if c.URL == "" {
		return nil, nil, errors.New("the archive's URL is empty: give a postgres:// URL (the password apart, from a Secret)")
	}
	pc, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		// pgx's parse errors carry the URL with its password masked; say what shape is wanted.
		return nil, nil, fmt.Errorf("the archive's URL: %w (want postgres://user@host:5432/database?sslmode=verify-full)", err)
	}
	if c.Password != "" {
		pc.ConnConfig.Password = c.Password
	}
	if c.MaxConns > 0 {
		pc.MaxConns = c.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, fmt.Errorf("the archive at %s: %w", where(pc), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("the archive at %s does not answer: %w", where(pc), err)
	}
	return &Store{pool: pool}, pc, nil
}

// where names the database without credentials.
func where(pc *pgxpool.Config) string {
	return fmt.Sprintf("%s:%d/%s (user %s)", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database, pc.ConnConfig.User)
}

func (s *Store) migrate(ctx context.Context) error {
	db := stdlib.OpenDBFromPool(s.pool)
	defer func() { _ = db.Close() }() // the pool stays open: it is the Store's
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return err
	}
	dir, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, dir,
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true), goose.WithTableName("archive_schema_versions"))
	if err != nil {
		return err
	}
	_, err = p.Up(ctx)
	return err
}

// SchemaVersion is the newest migration applied.
func (s *Store) SchemaVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM archive_schema_versions WHERE is_applied`).Scan(&v)
	return v, err
}

// Close releases the pool.
func (s *Store) Close() { s.pool.Close() }

// Ping says whether the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// Put archives r. Writing the same run again (a retry after a crash, or a later capture of the
// same run) leaves one row, with the newest content and the time it was first archived.
func (s *Store) Put(ctx context.Context, r Record) error {
	if err := r.validate(); err != nil {
		return err
	}
	b, err := json.Marshal(body{Object: r.Object, Events: r.Events, Jobs: r.Jobs, Logs: r.Logs})
	if err != nil {
		return fmt.Errorf("run %s/%s: encoding its record: %w", r.Namespace, r.Name, err)
	}
	_, err = s.pool.Exec(ctx, `
INSERT INTO runs (uid, kind, namespace, name, agent, phase, created_at, finished_at, record)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (uid) DO UPDATE SET kind = EXCLUDED.kind, namespace = EXCLUDED.namespace, name = EXCLUDED.name,
	agent = EXCLUDED.agent, phase = EXCLUDED.phase, created_at = EXCLUDED.created_at,
	finished_at = EXCLUDED.finished_at, record = EXCLUDED.record`,
		r.UID, r.Kind, r.Namespace, r.Name, r.Agent, r.Phase, r.CreatedAt, r.FinishedAt, b)
	if err != nil {
		return fmt.Errorf("archiving run %s/%s (uid %s): %w", r.Namespace, r.Name, r.UID, err)
	}
	return nil
}

func (r Record) validate() error {
	var missing []string
	for _, f := range []struct{ name, v string }{{"uid", r.UID}, {"kind", r.Kind}, {"namespace", r.Namespace}, {"name", r.Name}, {"phase", r.Phase}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if r.FinishedAt.IsZero() {
		missing = append(missing, "finishedAt")
	}
	if len(missing) > 0 {
		return fmt.Errorf("run %s/%s cannot be archived without %s", r.Namespace, r.Name, strings.Join(missing, ", "))
	}
	if len(r.Object) > 0 && !json.Valid(r.Object) {
		return fmt.Errorf("run %s/%s: its object is not JSON", r.Namespace, r.Name)
	}
	return nil
}

// Has reports whether the run with uid is archived.
func (s *Store) Has(ctx context.Context, uid string) (bool, error) {
	var ok bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE uid = $1)`, uid).Scan(&ok)
	return ok, err
}

// Get returns the archived run with uid, or ErrNotFound.
func (s *Store) Get(ctx context.Context, uid string) (Record, error) {
	var r Record
	var b []byte
	err := s.pool.QueryRow(ctx, `
SELECT uid, kind, namespace, name, agent, phase, created_at, finished_at, archived_at, record
FROM runs WHERE uid = $1`, uid).Scan(&r.UID, &r.Kind, &r.Namespace, &r.Name, &r.Agent, &r.Phase,
		&r.CreatedAt, &r.FinishedAt, &r.ArchivedAt, &b)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("reading archived run %s: %w", uid, err)
	}
	var bd body
	if err := json.Unmarshal(b, &bd); err != nil {
		return Record{}, fmt.Errorf("archived run %s: its record does not decode: %w", uid, err)
	}
	r.Object, r.Events, r.Jobs, r.Logs = bd.Object, bd.Events, bd.Jobs, bd.Logs
	return r, nil
}

// Query picks archived runs. Namespace "" is every namespace; the other filters are exact
// matches, and the time range is on when the run finished ([Since, Until)).
type Query struct {
	Namespace, Kind, Name, Agent, Phase string
	Since, Until                        time.Time
	// Limit is the page size (default 100, at most 1000).
	Limit int
	// Cursor continues an earlier list with the same filters (its Page.Next).
	Cursor string
}

// Page is one page of a list, newest first; Next is empty on the last page.
type Page struct {
	Runs []Summary `json:"runs"`
	Next string    `json:"next,omitempty"`
}

const (
	defaultLimit = 100
	maxLimit     = 1000
)

// BadCursorError: a cursor that is not one of this archive's, or belongs to another query.
type BadCursorError struct{ Reason string }

func (e *BadCursorError) Error() string {
	return "the cursor " + e.Reason + ": start again without it"
}

// QueryError: a query the archive cannot answer as asked (a negative page size, an empty time
// range). Its message says what to change.
type QueryError struct{ Msg string }

func (e *QueryError) Error() string { return e.Msg }

// IsBadQuery reports whether err is the caller's (a QueryError or a BadCursorError), not the
// database's.
func IsBadQuery(err error) bool {
	var q *QueryError
	var c *BadCursorError
	return errors.As(err, &q) || errors.As(err, &c)
}

// cursor is where a page ended, and which query it belongs to.
type cursor struct {
	Finished time.Time `json:"f"`
	UID      string    `json:"u"`
	Query    string    `json:"q"`
}

// fingerprint identifies a query's filters (not its limit or cursor).
func (q Query) fingerprint() string {
	h := sha256.Sum256([]byte(strings.Join([]string{q.Namespace, q.Kind, q.Name, q.Agent, q.Phase,
		q.Since.UTC().Format(time.RFC3339Nano), q.Until.UTC().Format(time.RFC3339Nano)}, "\x00")))
	return hex.EncodeToString(h[:8])
}

func (q Query) after() (*cursor, error) {
	if q.Cursor == "" {
		return nil, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	if err != nil {
		return nil, &BadCursorError{Reason: "is not one this archive gave out"}
	}
	var c cursor
	if err := json.Unmarshal(raw, &c); err != nil || c.UID == "" || c.Finished.IsZero() {
		return nil, &BadCursorError{Reason: "is not one this archive gave out"}
	}
	if c.Query != q.fingerprint() {
		return nil, &BadCursorError{Reason: "belongs to a list with other filters"}
	}
	return &c, nil
}

// List returns a page of archived runs matching q, newest finished first.
func (s *Store) List(ctx context.Context, q Query) (Page, error) {
	limit := q.Limit
	switch {
	case limit < 0:
		return Page{}, &QueryError{Msg: fmt.Sprintf("limit %d: give a page size from 1 to %d (0 for %d)", limit, maxLimit, defaultLimit)}
	case limit == 0:
		limit = defaultLimit
	case limit > maxLimit:
		limit = maxLimit
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
		return Page{}, &QueryError{Msg: fmt.Sprintf("the time range [%s, %s) is empty: since must be before until",
			q.Since.UTC().Format(time.RFC3339), q.Until.UTC().Format(time.RFC3339))}
	}
	after, err := q.after()
	if err != nil {
		return Page{}, err
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	for _, f := range []struct{ col, v string }{{"namespace", q.Namespace}, {"kind", q.Kind}, {"name", q.Name}, {"agent", q.Agent}, {"phase", q.Phase}} {
		if f.v != "" {
			where = append(where, f.col+" = "+arg(f.v))
		}
	}
	if !q.Since.IsZero() {
		where = append(where, "finished_at >= "+arg(q.Since))
	}
	if !q.Until.IsZero() {
		where = append(where, "finished_at < "+arg(q.Until))
	}
	if after != nil {
		where = append(where, "(finished_at, uid) < ("+arg(after.Finished)+", "+arg(after.UID)+")")
	}
	sql := `SELECT uid, kind, namespace, name, agent, phase, created_at, finished_at, archived_at FROM runs`
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY finished_at DESC, uid DESC LIMIT " + arg(limit+1)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return Page{}, fmt.Errorf("listing archived runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Summary, error) {
		var r Summary
		err := row.Scan(&r.UID, &r.Kind, &r.Namespace, &r.Name, &r.Agent, &r.Phase, &r.CreatedAt, &r.FinishedAt, &r.ArchivedAt)
		return r, err
	})
	if err != nil {
		return Page{}, fmt.Errorf("listing archived runs: %w", err)
	}
	p := Page{Runs: runs}
	if len(runs) > limit {
		p.Runs = runs[:limit]
		last := p.Runs[limit-1]
		b, _ := json.Marshal(cursor{Finished: last.FinishedAt, UID: last.UID, Query: q.fingerprint()})
		p.Next = base64.RawURLEncoding.EncodeToString(b)
	}
	return p, nil
}

// DeleteFinishedBefore deletes archived runs that finished before cutoff, at most batch of them
// (oldest first), and returns how many it deleted: call it until it returns fewer than batch.
// With namespaces, only runs of those namespaces go (an archive shared by several installs, each
// pruning its own); without, every run does.
func (s *Store) DeleteFinishedBefore(ctx context.Context, cutoff time.Time, batch int, namespaces ...string) (int64, error) {
	if batch <= 0 {
		return 0, fmt.Errorf("batch %d: delete at least one row per batch", batch)
	}
	sql, args := `
DELETE FROM runs WHERE uid IN (
	SELECT uid FROM runs WHERE finished_at < $1 ORDER BY finished_at, uid LIMIT $2)`, []any{cutoff, batch}
	if len(namespaces) > 0 {
		sql, args = `
DELETE FROM runs WHERE uid IN (
	SELECT uid FROM runs WHERE namespace = ANY($3) AND finished_at < $1 ORDER BY finished_at, uid LIMIT $2)`, append(args, namespaces)
	}
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return 0, fmt.Errorf("deleting archived runs that finished before %s: %w", cutoff.UTC().Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}
