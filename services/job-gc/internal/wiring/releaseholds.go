package wiring

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/agentplane/agentplane/libs/api/client/clientset/versioned"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/jobresult"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/services/job-gc/internal/archiver"
)

// ReleaseHolds is `job-gc release-holds`, what the chart's pre-delete hook runs before job-gc
// goes: it releases the job-result hold on every run-controller Job, and the run archive's
// finalizer on every AgentRun and OrchestrationRun, in the namespaces job-gc serves
// (JANGAR_AGENTS_CONTROLLER_NAMESPACES, else POD_NAMESPACE), since nothing else would. It prints
// each object released and returns the exit code: 0, 1 when a release failed, 2 on bad
// configuration.
func ReleaseHolds(ctx context.Context, env *config.Env, stdout, stderr io.Writer) int {
	namespaces := env.List("JANGAR_AGENTS_CONTROLLER_NAMESPACES", nil)
	if len(namespaces) == 0 {
		namespaces = []string{env.String("POD_NAMESPACE", "")}
	}
	kubeconfig := env.String("KUBECONFIG", "")
	if err := env.Err(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if namespaces[0] == "" {
		fmt.Fprintln(stderr, "job-gc release-holds: set JANGAR_AGENTS_CONTROLLER_NAMESPACES (or POD_NAMESPACE) to the namespaces whose Jobs to release")
		return 2
	}
	cfg, err := kubeclient.RESTConfig(kubeconfig, "agentplane-job-gc-release-holds")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	total, runs := 0, 0
	for _, ns := range namespaces {
		n, err := jobresult.ReleaseAll(ctx, kc, ns, "agentplane-job-gc", false, func(j *batchv1.Job) {
			fmt.Fprintf(stdout, "released job/%s -n %s\n", j.Name, j.Namespace)
		})
		total += n
		if err != nil {
			fmt.Fprintf(stderr, "namespace %s: %v\n", ns, err)
			return 1
		}
		n, err = archiver.ReleaseAll(ctx, client, ns, func(kind, name string) {
			fmt.Fprintf(stdout, "released %s/%s -n %s (archive)\n", strings.ToLower(kind), name, ns)
		})
		runs += n
		if err != nil {
			fmt.Fprintf(stderr, "namespace %s: %v\n", ns, err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "%d job-result hold(s) and %d archive finalizer(s) released in %v\n", total, runs, namespaces)
	return 0
}
