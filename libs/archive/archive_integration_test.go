//go:build integration

package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentplane/agentplane/libs/testenv"
)

// TestMain stops the package's PostgreSQL (a process of its own, which would outlive the test
// binary) once every test has run.
func TestMain(m *testing.M) {
	code := m.Run()
	if pg != nil {
		_ = pg.Close()
	}
	os.Exit(testenv.NoLeaks(code))
}

// postgres is one server for the package's tests, each on a database of its own.
var (
	pgOnce sync.Once
	pg     *testenv.Postgres
	pgErr  error
)

// dbs numbers the tests' databases (a test may open more than one).
var dbs atomic.Int64

func server(t testing.TB) *testenv.Postgres {
	t.Helper()
	pgOnce.Do(func() { pg, pgErr = testenv.StartPostgres() })
	if pgErr != nil {
		t.Fatal(pgErr)
	}
	return pg
}

// open gives a test a Store on an empty database of its own.
func open(t testing.TB) (*Store, Config) {
	t.Helper()
	p := server(t)
	ctx := context.Background()
	admin, err := Open(ctx, Config{URL: p.URL})
	if err != nil {
		t.Fatal(err)
	}
	db := fmt.Sprintf("%s_%d", strings.ToLower(strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())), dbs.Add(1))
	if _, err := admin.pool.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.pool.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	// The URL names the database and the user; the password is given apart, as the charts do.
	c := Config{URL: fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", p.User, p.Addr, db), Password: p.Password}
	s, err := Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, c
}

func run(uid, ns, name, agent, phase string, finished time.Time) Record {
	return Record{
		Summary: Summary{UID: uid, Kind: "AgentRun", Namespace: ns, Name: name, Agent: agent, Phase: phase,
			CreatedAt: finished.Add(-time.Minute), FinishedAt: finished},
		Object: json.RawMessage(fmt.Sprintf(`{"metadata":{"name":%q},"status":{"phase":%q}}`, name, phase)),
	}
}

func TestStoresStartingTogetherMigrateOnce(t *testing.T) {
	_, c := open(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := Open(ctx, c)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, err := s.SchemaVersion(ctx); err != nil || v != 1 {
		t.Fatalf("schema version %d %v, want 1", v, err)
	}
	var applied int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM archive_schema_versions WHERE version_id = 1`).Scan(&applied); err != nil || applied != 1 {
		t.Fatalf("migration 1 recorded %d times (%v), want once", applied, err)
	}
}

func TestARetriedPutStoresOneRow(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	r := run("u1", "team-a", "hello", "echo", "Succeeded", now)
	if err := s.Put(ctx, r); err != nil {
		t.Fatal(err)
	}
	first, err := s.Get(ctx, "u1")
	if err != nil {
		t.Fatal(err)
	}
	r.Events = []Event{{Type: "Normal", Reason: "Succeeded", Message: "done", First: now, Last: now}}
	if err := s.Put(ctx, r); err != nil { // the write retried after a crash, with more captured
		t.Fatal(err)
	}
	var rows int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM runs WHERE uid = 'u1'`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d rows for one run (%v), want 1", rows, err)
	}
	got, err := s.Get(ctx, "u1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != 1 || got.Events[0].Reason != "Succeeded" {
		t.Fatalf("events %+v, want the retried write's one", got.Events)
	}
	if !got.ArchivedAt.Equal(first.ArchivedAt) {
		t.Fatalf("archived at %s after the retry, want the first write's %s", got.ArchivedAt, first.ArchivedAt)
	}
	if !got.FinishedAt.Equal(now) || got.Phase != "Succeeded" || string(got.Object) == "" {
		t.Fatalf("read back %+v", got.Summary)
	}
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a run never archived: %v, want ErrNotFound", err)
	}
}

func TestPutRefusesARecordWithoutItsKeys(t *testing.T) {
	s, _ := open(t)
	r := run("", "team-a", "hello", "", "", time.Time{})
	err := s.Put(context.Background(), r)
	if err == nil || !strings.Contains(err.Error(), "without uid, phase, finishedAt") {
		t.Fatalf("%v, want a refusal naming uid, phase and finishedAt", err)
	}
}

// TestListsPageNewestFirstThroughEveryFilter: 250 runs over two namespaces, three agents and
// two phases; every filter's pages, followed by their cursors, are exactly the matching runs,
// newest finished first, each once.
func TestListsPageNewestFirstThroughEveryFilter(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var all []Record
	for i := range 250 {
		// Every fifth run shares its finish time with the one before: the cursor's uid breaks ties.
		at := base.Add(time.Duration(i-i%5/4) * time.Minute)
		r := run(fmt.Sprintf("uid-%03d", i), []string{"team-a", "team-b"}[i%2], fmt.Sprintf("run-%d", i%40),
			[]string{"echo", "review", "plan"}[i%3], []string{"Succeeded", "Failed"}[i%7/6], at)
		all = append(all, r)
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	newestFirst := func(match func(Record) bool) []string {
		var want []Record
		for _, r := range all {
			if match(r) {
				want = append(want, r)
			}
		}
		slices.SortFunc(want, func(a, b Record) int {
			if c := b.FinishedAt.Compare(a.FinishedAt); c != 0 {
				return c
			}
			return strings.Compare(b.UID, a.UID)
		})
		var uids []string
		for _, r := range want {
			uids = append(uids, r.UID)
		}
		return uids
	}
	since, until := base.Add(30*time.Minute), base.Add(90*time.Minute)
	for _, tc := range []struct {
		name  string
		q     Query
		match func(Record) bool
	}{
		{"every namespace", Query{}, func(Record) bool { return true }},
		{"namespace", Query{Namespace: "team-b"}, func(r Record) bool { return r.Namespace == "team-b" }},
		{"agent", Query{Namespace: "team-a", Agent: "review"}, func(r Record) bool { return r.Namespace == "team-a" && r.Agent == "review" }},
		{"phase", Query{Namespace: "team-a", Phase: "Failed"}, func(r Record) bool { return r.Namespace == "team-a" && r.Phase == "Failed" }},
		{"name", Query{Namespace: "team-b", Name: "run-7"}, func(r Record) bool { return r.Namespace == "team-b" && r.Name == "run-7" }},
		{"time range", Query{Namespace: "team-a", Since: since, Until: until}, func(r Record) bool {
			return r.Namespace == "team-a" && !r.FinishedAt.Before(since) && r.FinishedAt.Before(until)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := newestFirst(tc.match)
			if len(want) == 0 {
				t.Fatal("the fixture matches nothing: the test would prove nothing")
			}
			var got []string
			q := tc.q
			q.Limit = 7
			for pages := 0; ; pages++ {
				if pages > 100 {
					t.Fatal("the cursor never ends")
				}
				p, err := s.List(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				if len(p.Runs) > q.Limit {
					t.Fatalf("a page of %d, limit %d", len(p.Runs), q.Limit)
				}
				for _, r := range p.Runs {
					got = append(got, r.UID)
				}
				if p.Next == "" {
					break
				}
				q.Cursor = p.Next
			}
			if !slices.Equal(got, want) {
				t.Fatalf("paged %d runs %v\nwant %d %v", len(got), got, len(want), want)
			}
		})
	}
}

func TestBadCursorsAndRangesAreRefusedClearly(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		if err := s.Put(ctx, run(fmt.Sprintf("u%d", i), "team-a", "r", "echo", "Succeeded", base.Add(time.Duration(i)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	p, err := s.List(ctx, Query{Namespace: "team-a", Limit: 1})
	if err != nil || p.Next == "" {
		t.Fatalf("first page: %v next=%q", err, p.Next)
	}
	var bad *BadCursorError
	for _, tc := range []struct {
		name string
		q    Query
		want string
	}{
		{"not base64", Query{Namespace: "team-a", Cursor: "%%%"}, "is not one this archive gave out"},
		{"not a cursor", Query{Namespace: "team-a", Cursor: "e30"}, "is not one this archive gave out"}, // {}
		{"another query's", Query{Namespace: "team-a", Agent: "echo", Cursor: p.Next}, "belongs to a list with other filters"},
	} {
		if _, err := s.List(ctx, tc.q); !errors.As(err, &bad) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "start again without it") {
			t.Errorf("%s: %v, want a BadCursorError saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := s.List(ctx, Query{Since: base.Add(time.Hour), Until: base}); err == nil || !strings.Contains(err.Error(), "since must be before until") {
		t.Errorf("an empty range: %v", err)
	}
	if _, err := s.List(ctx, Query{Limit: -1}); err == nil || !strings.Contains(err.Error(), "page size") {
		t.Errorf("a negative limit: %v", err)
	}
}

func TestRowsPastTheArchivesRetentionGoInBatches(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 25 {
		if err := s.Put(ctx, run(fmt.Sprintf("u%02d", i), "team-a", "r", "", "Succeeded", base.Add(time.Duration(i)*time.Hour))); err != nil {
			t.Fatal(err)
		}
	}
	cutoff := base.Add(20 * time.Hour) // u00..u19 finished before it
	var batches []int64
	for {
		n, err := s.DeleteFinishedBefore(ctx, cutoff, 8)
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, n)
		if n < 8 {
			break
		}
	}
	if !slices.Equal(batches, []int64{8, 8, 4}) {
		t.Fatalf("batches %v, want 8, 8, 4", batches)
	}
	p, err := s.List(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, r := range p.Runs {
		left = append(left, r.UID)
	}
	if !slices.Equal(left, []string{"u24", "u23", "u22", "u21", "u20"}) {
		t.Fatalf("left %v, want the five that finished at or after the cutoff", left)
	}
}

// TestPruningOneInstallsNamespacesLeavesTheOthers: an archive shared by two installs, each
// pruning its own namespaces, loses only the pruned namespaces' old rows.
func TestPruningOneInstallsNamespacesLeavesTheOthers(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	old, recent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for i, ns := range []string{"team-a", "team-b", "team-c"} {
		for j, at := range []time.Time{old, recent} {
			if err := s.Put(ctx, run(fmt.Sprintf("u%d%d", i, j), ns, "r", "", "Succeeded", at)); err != nil {
				t.Fatal(err)
			}
		}
	}
	n, err := s.DeleteFinishedBefore(ctx, recent.Add(-time.Hour), 100, "team-a", "team-c")
	if err != nil || n != 2 {
		t.Fatalf("deleted %d (%v), want team-a's and team-c's old rows (2)", n, err)
	}
	p, err := s.List(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, r := range p.Runs {
		left = append(left, r.UID)
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{"u01", "u10", "u11", "u21"}) {
		t.Fatalf("left %v, want team-b's two rows and the recent ones", left)
	}
}

// TestNoPasswordInErrors: a wrong password and an unreachable database each say what is wrong,
// and neither error holds the password.
func TestNoPasswordInErrors(t *testing.T) {
	p := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const secret = "s3cret-not-the-password"
	_, err := Open(ctx, Config{URL: fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", p.User, p.Addr), Password: secret})
	if err == nil || !strings.Contains(err.Error(), "password authentication failed") || strings.Contains(err.Error(), secret) {
		t.Fatalf("a wrong password: %v", err)
	}
	_, err = Open(ctx, Config{URL: fmt.Sprintf("postgres://%s:%s@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2", p.User, secret)})
	if err == nil || !strings.Contains(err.Error(), "does not answer") && !strings.Contains(err.Error(), "connect") || strings.Contains(err.Error(), secret) {
		t.Fatalf("an unreachable database: %v", err)
	}
	_, err = Open(ctx, Config{URL: "postgres://u:" + secret + "@host:notaport/db"})
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "want postgres://") {
		t.Fatalf("a malformed URL: %v", err)
	}
}

// TestAWriteWhileTheDatabaseIsDownFailsAndTheNextSucceeds: the pool reconnects once the server is
// back; nothing is written twice or lost.
func TestAWriteWhileTheDatabaseIsDownFailsAndTheNextSucceeds(t *testing.T) {
	s, _ := open(t)
	p := server(t)
	ctx := context.Background()
	now := time.Now().UTC()
	if err := s.Put(ctx, run("before", "team-a", "r", "", "Succeeded", now)); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := s.Put(short, run("during", "team-a", "r", "", "Succeeded", now))
	cancel()
	if err == nil {
		t.Fatal("a write with the database stopped succeeded")
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the write after the database is back", func() error {
		return s.Put(ctx, run("during", "team-a", "r", "", "Succeeded", now))
	})
	for _, uid := range []string{"before", "during"} {
		if ok, err := s.Has(ctx, uid); err != nil || !ok {
			t.Fatalf("run %s archived: %v %v", uid, ok, err)
		}
	}
}

// TestTLSToTheDatabaseIsVerified: with sslmode=verify-full and sslrootcert (what the chart's
// archive.tls.caSecretRef sets), the archive connects over TLS to a server whose certificate the
// CA signed, and refuses one signed by another CA, saying so, without the password in the error.
func TestTLSToTheDatabaseIsVerified(t *testing.T) {
	p, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	pki := testenv.NewPKI(t, "archive")
	if err := p.ServeTLS(pki.CertFile, pki.KeyFile); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, host := range []string{p.Addr, strings.Replace(p.Addr, "127.0.0.1", "localhost", 1)} {
		s, err := Open(ctx, Config{URL: fmt.Sprintf("postgres://%s@%s/postgres?sslmode=verify-full&sslrootcert=%s", p.User, host, pki.CAFile), Password: p.Password})
		if err != nil {
			t.Fatalf("%s over verified TLS: %v", host, err)
		}
		var ssl bool
		if err := s.pool.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
			t.Errorf("%s: the connection is not TLS (%v, %v)", host, ssl, err)
		}
		if err := s.Put(ctx, run("tls-"+host, "team-a", "r", "", "Succeeded", time.Now())); err != nil {
			t.Errorf("%s: a write over TLS: %v", host, err)
		}
		s.Close()
	}
	other := testenv.NewPKI(t, "someone else")
	_, err = Open(ctx, Config{URL: fmt.Sprintf("postgres://%s@%s/postgres?sslmode=verify-full&sslrootcert=%s&connect_timeout=5", p.User, p.Addr, other.CAFile), Password: p.Password})
	if err == nil || !strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), p.Password) {
		t.Fatalf("a server certificate another CA signed: %v, want a refusal naming the certificate, without the password", err)
	}
}

// TestAReaderNeitherMigratesNorReadsAnUnmigratedArchive: OpenReader (watch-gateway's) refuses a
// database job-gc has not migrated, says so, and leaves it as it was; once Open (job-gc's) has
// migrated it, the reader reads what the writer wrote.
func TestAReaderNeitherMigratesNorReadsAnUnmigratedArchive(t *testing.T) {
	p := server(t)
	ctx := context.Background()
	admin, err := Open(ctx, Config{URL: p.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	const db = "reader_before_writer"
	if _, err := admin.pool.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.pool.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	c := Config{URL: fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", p.User, p.Addr, db), Password: p.Password}
	if _, err := OpenReader(ctx, c); err == nil || !strings.Contains(err.Error(), "schema version 0, this reader needs 1") ||
		!strings.Contains(err.Error(), "job-gc creates and migrates it") || strings.Contains(err.Error(), p.Password) {
		t.Fatalf("a reader on an empty database: %v", err)
	}
	chk, err := pgxpool.New(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", p.User, p.Password, p.Addr, db))
	if err != nil {
		t.Fatal(err)
	}
	defer chk.Close()
	var untouched bool
	if err := chk.QueryRow(ctx, "SELECT to_regclass('archive_schema_versions') IS NULL AND to_regclass('runs') IS NULL").Scan(&untouched); err != nil || !untouched {
		t.Fatalf("the reader changed the database (untouched %v, %v)", untouched, err)
	}
	w, err := Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Put(ctx, run("u-1", "team-a", "hello", "codex", "Succeeded", time.Now())); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := r.Get(ctx, "u-1"); err != nil || got.Name != "hello" {
		t.Fatalf("the reader after the writer: %v %v", got.Summary, err)
	}
}
