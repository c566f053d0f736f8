//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// deploymentEnv is the first container of the rendered Deployment, and its variables by name
// (a value, or its valueFrom).
func deploymentEnv(objs []map[string]any) (map[string]any, any) {
	c := at(kind(objs, "Deployment")[0], "spec", "template", "spec", "containers", "0")
	env := map[string]any{}
	for _, e := range at(c, "env").([]any) {
		m := e.(map[string]any)
		if v, ok := m["value"]; ok {
			env[fmt.Sprint(m["name"])] = v
		} else {
			env[fmt.Sprint(m["name"])] = m["valueFrom"]
		}
	}
	return env, c
}

// roleRules lists job-gc's Role rules as "resource:verb" pairs.
func roleRules(t *testing.T, objs []map[string]any) []string {
	t.Helper()
	roles := kind(objs, "Role")
	var out []string
	for _, r := range roles {
		if !strings.HasSuffix(fmt.Sprint(at(r, "metadata", "name")), "job-gc") {
			continue
		}
		for _, rule := range at(r, "rules").([]any) {
			m := rule.(map[string]any)
			for _, res := range m["resources"].([]any) {
				for _, v := range m["verbs"].([]any) {
					out = append(out, fmt.Sprintf("%s:%s", res, v))
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no job-gc Role in %d objects", len(objs))
	}
	return out
}

// TestJobGCChartArchiveValues (#37): the archive is off by default (no JANGAR_ARCHIVE_* variable,
// nothing it would capture readable); on, the chart gives job-gc the URL (with the CA's
// sslrootcert and verify-full when a CA Secret is named), the password from its Secret, the
// capture's rights and the CA's volume; a JANGAR_ARCHIVE_* variable through env.vars or extraEnv
// (archiving without those rights) is refused, as is archiving on without a URL.
func TestJobGCChartArchiveValues(t *testing.T) {
	h := newHelmEnv(t)
	off := objects(t, h, "job-gc")
	dep := kind(off, "Deployment")[0]
	for _, e := range at(dep, "spec", "template", "spec", "containers", "0", "env").([]any) {
		if name := fmt.Sprint(e.(map[string]any)["name"]); strings.HasPrefix(name, "JANGAR_ARCHIVE_") {
			t.Errorf("archiving off sets %s", name)
		}
	}
	rules := roleRules(t, off)
	for _, want := range []string{"agentruns:patch", "orchestrationruns:patch"} { // to release the finalizer once turned off
		if !slices.Contains(rules, want) {
			t.Errorf("archiving off: the Role lacks %s: %v", want, rules)
		}
	}
	for _, no := range []string{"events:list", "pods:list", "pods/log:get"} {
		if slices.Contains(rules, no) {
			t.Errorf("archiving off: the Role grants %s", no)
		}
	}

	on := objects(t, h, "job-gc", "--set", "archive.enabled=true", "--set", "archive.url=postgres://agentplane@archive-rw.agents.svc:5432/agentplane",
		"--set", "archive.passwordSecretRef.name=archive-app", "--set", "archive.tls.caSecretRef.name=archive-ca", "--set", "archive.retentionSeconds=86400")
	env, c := deploymentEnv(on)
	if got := env["JANGAR_ARCHIVE_URL"]; got != "postgres://agentplane@archive-rw.agents.svc:5432/agentplane?sslrootcert=/etc/agentplane/archive-ca/ca.crt&sslmode=verify-full" {
		t.Errorf("JANGAR_ARCHIVE_URL %v", got)
	}
	if got := fmt.Sprint(env["JANGAR_ARCHIVE_PASSWORD"]); got != "map[secretKeyRef:map[key:password name:archive-app]]" {
		t.Errorf("JANGAR_ARCHIVE_PASSWORD %s, want from the Secret archive-app", got)
	}
	if env["JANGAR_ARCHIVE_RETENTION_SECONDS"] != "86400" || env["JANGAR_ARCHIVE_LOG_LINES"] != "100" {
		t.Errorf("retention %v, log lines %v", env["JANGAR_ARCHIVE_RETENTION_SECONDS"], env["JANGAR_ARCHIVE_LOG_LINES"])
	}
	if m := fmt.Sprint(at(c, "volumeMounts")); !strings.Contains(m, "mountPath:/etc/agentplane/archive-ca") {
		t.Errorf("the CA is not mounted: %s", m)
	}
	// The archive switch: the policy agentplane-archive-hold holds every run created in job-gc's
	// namespace while a RoleBinding there grants its identity the verb archive; off, none.
	switchOf := func(objs []map[string]any) []string {
		var out []string
		for _, b := range kind(objs, "RoleBinding") {
			if strings.HasSuffix(fmt.Sprint(at(b, "metadata", "name")), "archive-switch") {
				out = append(out, fmt.Sprint(at(b, "metadata", "namespace"), " ", at(b, "subjects")))
			}
		}
		return out
	}
	if got := switchOf(on); len(got) != 1 || !strings.Contains(got[0], "name:archive-switch namespace:agentplane") {
		t.Errorf("archiving on: the archive switch's RoleBindings %v, want one granting system:serviceaccount:agentplane:archive-switch", got)
	}
	if got := switchOf(off); len(got) != 0 {
		t.Errorf("archiving off: the archive switch is granted: %v", got)
	}
	// With rbac.clusterScoped job-gc still archives only in its namespaces: the switch is granted
	// in each of them and nowhere else (a run held where no job-gc archives could not be deleted).
	wide := objects(t, h, "job-gc", "--set", "archive.enabled=true", "--set", "archive.url=postgres://agentplane@archive/agentplane",
		"--set", "rbac.clusterScoped=true", "--set", "controller.namespaces={team-a,team-b}")
	if got := switchOf(wide); len(got) != 2 || !strings.HasPrefix(got[0], "team-a ") || !strings.HasPrefix(got[1], "team-b ") {
		t.Errorf("rbac.clusterScoped: the archive switch's RoleBindings %v, want one in team-a and one in team-b", got)
	}
	for _, b := range kind(wide, "ClusterRoleBinding") {
		if name := fmt.Sprint(at(b, "metadata", "name")); strings.HasSuffix(name, "archive-switch") {
			t.Errorf("rbac.clusterScoped: the archive switch is granted cluster-wide (%s)", name)
		}
	}
	rules = roleRules(t, on)
	for _, want := range []string{"events:list", "events:watch", "pods:list", "pods/log:get", "agentruns:patch"} {
		if !slices.Contains(rules, want) {
			t.Errorf("archiving on: the Role lacks %s: %v", want, rules)
		}
	}
	for _, no := range []string{"secrets:get", "secrets:list", "pods:get", "pods/exec:create", "events:create"} {
		if slices.Contains(rules, no) {
			t.Errorf("archiving on: the Role grants %s", no)
		}
	}
	// A URL with an sslmode of its own keeps it.
	own := objects(t, h, "job-gc", "--set", "archive.enabled=true", "--set", "archive.url=postgres://u@db/runs?sslmode=verify-ca",
		"--set", "archive.tls.caSecretRef.name=ca")
	if s := fmt.Sprint(at(kind(own, "Deployment")[0], "spec", "template", "spec", "containers", "0", "env")); !strings.Contains(s,
		"value:postgres://u@db/runs?sslmode=verify-ca&sslrootcert=/etc/agentplane/archive-ca/ca.crt]") {
		t.Errorf("a URL's own sslmode: %s", s)
	}

	wantRefused(t, h, "job-gc", "not env.vars", "--set", "env.vars.JANGAR_ARCHIVE_URL=postgres://u@db/runs")
	wantRefused(t, h, "job-gc", "not extraEnv", "--set", "extraEnv[0].name=JANGAR_ARCHIVE_URL,extraEnv[0].value=postgres://u@db/runs")
	wantRefused(t, h, "job-gc", "not extraEnv", "--set", "global.extraEnv[0].name=JANGAR_ARCHIVE_PASSWORD,global.extraEnv[0].value=x")
	wantRefused(t, h, "job-gc", "/archive/url", "--set", "archive.enabled=true")
}

// TestWatchGatewayChartReadsTheArchive (#37): off by default; on, the gateway gets the same
// connection as job-gc (the URL with the CA's sslrootcert and verify-full, the password from its
// Secret, the CA mounted), and with the aggregated API the console-viewer Role may list and get
// archivedruns there (the gateway then asks for the runs' own rights); on without a URL is
// refused.
func TestWatchGatewayChartReadsTheArchive(t *testing.T) {
	h := newHelmEnv(t)
	env, _ := deploymentEnv(objects(t, h, "watch-gateway"))
	for name := range env {
		if strings.HasPrefix(name, "JANGAR_ARCHIVE_") {
			t.Errorf("the archive off sets %s", name)
		}
	}
	on := objects(t, h, "watch-gateway", "--set", "archive.enabled=true", "--set", "archive.url=postgres://reader@archive-rw.agents.svc:5432/agentplane",
		"--set", "archive.passwordSecretRef.name=archive-reader", "--set", "archive.tls.caSecretRef.name=archive-ca", "--set", "archive.maxConns=3",
		"--set", "apiService.enabled=true", "--set", "tls.generate=true")
	env, c := deploymentEnv(on)
	if got := env["JANGAR_ARCHIVE_URL"]; got != "postgres://reader@archive-rw.agents.svc:5432/agentplane?sslrootcert=/etc/agentplane/archive-ca/ca.crt&sslmode=verify-full" {
		t.Errorf("JANGAR_ARCHIVE_URL %v", got)
	}
	if got := fmt.Sprint(env["JANGAR_ARCHIVE_PASSWORD"]); got != "map[secretKeyRef:map[key:password name:archive-reader]]" {
		t.Errorf("JANGAR_ARCHIVE_PASSWORD %s", got)
	}
	if env["JANGAR_ARCHIVE_MAX_CONNS"] != "3" {
		t.Errorf("JANGAR_ARCHIVE_MAX_CONNS %v", env["JANGAR_ARCHIVE_MAX_CONNS"])
	}
	if m := fmt.Sprint(at(c, "volumeMounts")); !strings.Contains(m, "mountPath:/etc/agentplane/archive-ca") {
		t.Errorf("the CA is not mounted: %s", m)
	}
	viewer := ""
	for _, r := range kind(on, "Role") {
		if strings.HasSuffix(fmt.Sprint(at(r, "metadata", "name")), "console-viewer") {
			viewer = fmt.Sprint(at(r, "rules"))
		}
	}
	if !strings.Contains(viewer, "resources:[archivedruns] verbs:[get list]") || strings.Contains(viewer, "pods/log") {
		t.Errorf("the console-viewer Role with the archive and the aggregated API: %s", viewer)
	}
	wantRefused(t, h, "watch-gateway", "/archive/url", "--set", "archive.enabled=true")
}
