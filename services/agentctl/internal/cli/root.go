// Package cli implements agentctl's commands. Flags are kubectl's (cli-runtime's ConfigFlags:
// --kubeconfig, --context, -n, --as, --request-timeout, ...) so an operator's muscle memory
// carries over; exit codes are documented for scripts (exit.go).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"

	"github.com/agentplane/agentplane/libs/app"
)

// globalOptions are the flags every command shares: kubectl's.
type globalOptions struct {
	flags *genericclioptions.ConfigFlags
}

// clientConfig resolves the kubeconfig the way kubectl does: --kubeconfig, then $KUBECONFIG,
// then ~/.kube/config, with --context, -n, --as and the rest applied on top.
func (g *globalOptions) clientConfig() clientcmd.ClientConfig { return g.flags.ToRawKubeConfigLoader() }

// namespaceFlag is -n as given (empty when not given).
func (g *globalOptions) namespaceFlag() string {
	if g.flags.Namespace == nil {
		return ""
	}
	return *g.flags.Namespace
}

const rootLong = `agentctl works with agentplane's runs and operates its control plane.

Runs (AgentRuns and OrchestrationRuns), as argo and tkn users expect: submit, get, describe,
logs, wait, retry, resubmit and cancel. The control plane: status (status watch, status wait,
status history), diagnose, and jobs release-holds.

It reads your kubeconfig like kubectl, and its flags mean what kubectl's do (--kubeconfig,
--context, -n, --server, --token, --as, ...: the API server and how to reach it). The status
commands can instead read watch-gateway over gRPC (--gateway host:port, --gateway-token).

` + exitCodesHelp

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) (*cobra.Command, *bool) {
	g := &globalOptions{flags: genericclioptions.NewConfigFlags(true)}
	ran := false
	root := &cobra.Command{
		Use:   "agentctl",
		Short: "Operate the agentplane control plane",
		Long:  rootLong,
		Example: `  agentctl submit agent/codex --param issue=42 --watch
  agentctl get runs -o wide
  agentctl logs run plan-and-implement-1 -f
  agentctl status
  agentctl -n agents cancel orchestrationrun plan-and-implement-1 --wait
  agentctl completion bash > /etc/bash_completion.d/agentctl`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		Version:           app.Version,
		PersistentPreRun:  func(*cobra.Command, []string) { ran = true },
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	g.flags.AddFlags(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return withCode(ExitUsage, err) })
	_ = root.RegisterFlagCompletionFunc("context", kubeconfigCompletion(g, func(c *clientcmdapi.Config) []string { return keys(c.Contexts) }))
	_ = root.RegisterFlagCompletionFunc("cluster", kubeconfigCompletion(g, func(c *clientcmdapi.Config) []string { return keys(c.Clusters) }))
	_ = root.RegisterFlagCompletionFunc("user", kubeconfigCompletion(g, func(c *clientcmdapi.Config) []string { return keys(c.AuthInfos) }))
	_ = root.RegisterFlagCompletionFunc("namespace", namespaceCompletion(g))
	root.AddGroup(&cobra.Group{ID: "runs", Title: "Runs:"}, &cobra.Group{ID: "control", Title: "The control plane:"})
	for _, c := range []*cobra.Command{newSubmitCommand(g), newGetCommand(g), newDescribeCommand(g), newLogsCommand(g), newWaitCommand(g),
		newRetryCommand(g, true), newRetryCommand(g, false), newCancelCommand(g)} {
		c.GroupID = "runs"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newStatusCommand(g), newDiagnoseCommand(g), newJobsCommand(g)} {
		c.GroupID = "control"
		root.AddCommand(c)
	}
	root.AddCommand(newVersionCommand(g))
	// Notices about flags (deprecations) go to stderr, never into output a script parses.
	var quiet func(*cobra.Command)
	quiet = func(c *cobra.Command) {
		c.Flags().SetOutput(stderr)
		for _, sub := range c.Commands() {
			quiet(sub)
		}
	}
	quiet(root)
	return root, &ran
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// kubeconfigCompletion completes a flag from the names in the kubeconfig.
func kubeconfigCompletion(g *globalOptions, names func(*clientcmdapi.Config) []string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		raw, err := g.clientConfig().RawConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return names(&raw), cobra.ShellCompDirectiveNoFileComp
	}
}

// namespaceCompletion completes -n from the API server's namespaces, like kubectl.
func namespaceCompletion(g *globalOptions) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		cfg, err := g.clientConfig().ClientConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		// cobra runs completion as a command (__complete), so cmd carries Execute's context.
		ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
		defer cancel()
		list, err := kc.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, ns := range list.Items {
			out = append(out, ns.Name)
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// klogOnce: klog's logger is process-wide and not safe to swap while in use, so it is set once,
// before any command runs.
var klogOnce sync.Once

// quietKlog silences client-go's klog output (port-forward hiccups, for one), which agentctl
// reports in its own words; --debug keeps it.
func quietKlog(args []string) {
	klogOnce.Do(func() {
		if !slices.Contains(args, "--debug") {
			klog.SetLogger(logr.Discard())
		}
	})
}

// Execute runs agentctl with args and returns the process exit code (see exitCodesHelp).
func Execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	defer func() { // no input makes agentctl panic at a user; if something does, say so and exit 1
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "error: agentctl failed unexpectedly: %v (please report it)\n", r)
			code = ExitError
		}
	}()
	quietKlog(args)
	root, ran := newRootCommand(stdin, stdout, stderr) //nolint:contextcheck // the commands take ctx from cobra (cmd.Context()), which ExecuteContext below sets
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "error: %v\n", err)
	var e *exitError
	if !*ran && !errors.As(err, &e) { // unknown command, bad arguments: before any RunE
		return ExitUsage
	}
	return exitCode(err)
}
