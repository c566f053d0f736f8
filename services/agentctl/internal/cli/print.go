package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
)

// now is the clock of every age and duration agentctl prints (the golden tests stop it).
var now = time.Now

// outputFlags are kubectl's output flags for the run verbs: -o (a table by default, wide, json,
// yaml, kyaml, name, jsonpath=, jsonpath-as-json=, jsonpath-file=, go-template=,
// go-template-file=, template=, templatefile=, custom-columns=, custom-columns-file=),
// --no-headers, --show-labels, --template, --allow-missing-template-keys, --show-managed-fields.
type outputFlags struct {
	print      *genericclioptions.PrintFlags
	noHeaders  bool
	showLabels bool
}

func newOutputFlags(cmd *cobra.Command) *outputFlags {
	o := &outputFlags{print: genericclioptions.NewPrintFlags("")}
	o.print.JSONYamlPrintFlags.AddFlags(cmd)
	o.print.TemplatePrinterFlags.AddFlags(cmd)
	cmd.Flags().StringVarP(o.print.OutputFormat, "output", "o", "",
		"output format: wide, json, yaml, kyaml, name, jsonpath=..., jsonpath-as-json=..., jsonpath-file=..., go-template=..., go-template-file=..., custom-columns=..., custom-columns-file=... (default: a table)")
	o.print.OutputFlagSpecified = func() bool { return cmd.Flag("output").Changed }
	cmd.Flags().BoolVar(&o.noHeaders, "no-headers", false, "print tables (and custom-columns) without their header row")
	cmd.Flags().BoolVar(&o.showLabels, "show-labels", false, "add a column with each run's labels to the table")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"wide", "json", "yaml", "kyaml", "name", "jsonpath=", "go-template=", "custom-columns="}, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
	return o
}

func (o *outputFlags) format() string { return *o.print.OutputFormat }

// human reports whether the output is a table for people (the default or wide), not a format for
// scripts.
func (o *outputFlags) human() bool { f := o.format(); return f == "" || f == "wide" }

// runPrinter prints runs in the chosen format; one printer serves a whole watch (a table's header
// is printed once).
type runPrinter struct {
	o             *outputFlags
	allNamespaces bool
	table         printers.ResourcePrinter
	columns       []customColumn
	object        printers.ResourcePrinter
	printedHeader bool
}

func (o *outputFlags) printer(allNamespaces bool) (*runPrinter, error) {
	p := &runPrinter{o: o, allNamespaces: allNamespaces}
	format := o.format()
	switch {
	case format == "" || format == "wide":
		p.table = printers.NewTablePrinter(printers.PrintOptions{Wide: format == "wide", NoHeaders: o.noHeaders, WithNamespace: allNamespaces, ShowLabels: o.showLabels})
		return p, nil
	case strings.HasPrefix(format, "custom-columns="), strings.HasPrefix(format, "custom-columns-file="):
		cols, err := parseCustomColumns(format)
		if err != nil {
			return nil, withCode(ExitUsage, err)
		}
		p.columns = cols
		return p, nil
	}
	obj, err := o.print.ToPrinter()
	if err != nil {
		return nil, withCode(ExitUsage, fmt.Errorf("-o %s: %w", format, err))
	}
	p.object = obj
	return p, nil
}

// print writes runs: one object as itself, several (or a list asked for by kind) as a List.
func (p *runPrinter) print(w io.Writer, runs []*run, asList bool) error {
	switch {
	case p.table != nil:
		if len(runs) == 0 {
			return nil
		}
		return p.table.PrintObj(runTable(runs, now()), w)
	case p.columns != nil:
		return p.printColumns(w, runs)
	}
	if !asList && len(runs) == 1 {
		u, err := toUnstructured(runs[0])
		if err != nil {
			return err
		}
		return p.object.PrintObj(u, w)
	}
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}}}
	for _, r := range runs {
		u, err := toUnstructured(r)
		if err != nil {
			return err
		}
		list.Items = append(list.Items, *u)
	}
	return p.object.PrintObj(list, w)
}

func toUnstructured(r *run) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(r.obj)
	if err != nil {
		return nil, fmt.Errorf("convert %s: %w", r.ref(), err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// The columns of agentctl get runs; wide adds those of priority 1.
var runColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "the run's name"},
	{Name: "Kind", Type: "string", Description: "AgentRun or OrchestrationRun"},
	{Name: "Phase", Type: "string", Description: "Pending, Running, Succeeded, Failed or Cancelled"},
	{Name: "Definition", Type: "string", Description: "the Agent or Orchestration it runs"},
	{Name: "Steps", Type: "string", Description: "steps succeeded of all (OrchestrationRuns, workflow AgentRuns)"},
	{Name: "Duration", Type: "string", Description: "from its start to its end (or now)"},
	{Name: "Age", Type: "string", Description: "since it was created"},
	{Name: "Reason", Type: "string", Priority: 1, Description: "why it is in its phase"},
	{Name: "Origin", Type: "string", Priority: 1, Description: "the run it retries or resubmits"},
	{Name: "Message", Type: "string", Priority: 1, Description: "the status message"},
}

// runTable is runs as a Table, kubectl's way.
func runTable(runs []*run, at time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: runColumns}
	for _, r := range runs {
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells: []any{r.meta.Name, r.kind, r.phaseOrPending(), r.source, stepsCell(r), durationCell(r, at), age(r.meta.CreationTimestamp, at),
				none(r.reason), none(origin(r)), none(oneLine(r.message))},
			Object: runtime.RawExtension{Object: r.obj},
		})
	}
	return t
}

// stepsCell is "succeeded/all" for a run with steps, "-" for a run of one Job.
func stepsCell(r *run) string {
	switch {
	case r.or != nil:
		done := 0
		for _, s := range r.or.Status.StepStatuses {
			if s.Phase == agentsv1alpha1.PhaseSucceeded {
				done++
			}
		}
		return fmt.Sprintf("%d/%d", done, len(r.or.Status.StepStatuses))
	case r.ar != nil && r.ar.Spec.Workflow != nil:
		done := 0
		if r.ar.Status.Workflow != nil {
			for _, s := range r.ar.Status.Workflow.Steps {
				if s.Phase == agentsv1alpha1.PhaseSucceeded {
					done++
				}
			}
		}
		return fmt.Sprintf("%d/%d", done, len(r.ar.Spec.Workflow.Steps))
	}
	return "-"
}

func durationCell(r *run, at time.Time) string {
	d, ok := r.duration(at)
	if !ok {
		return "-"
	}
	return duration.HumanDuration(d)
}

func age(t metav1.Time, at time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(at.Sub(t.Time))
}

// origin says where a run came from: "retry of NAME" or "resubmit of NAME".
func origin(r *run) string {
	switch {
	case r.retryOf != "":
		return "retry of " + r.retryOf
	case r.resubmitOf != "":
		return "resubmit of " + r.resubmitOf
	}
	return ""
}

func none(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// oneLine keeps a message on its table row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// customColumn is one column of -o custom-columns=HEADER:JSONPATH,...
type customColumn struct {
	header string
	path   *jsonpath.JSONPath
}

func parseCustomColumns(format string) ([]customColumn, error) {
	spec, fromFile := strings.CutPrefix(format, "custom-columns-file=")
	if fromFile {
		b, err := os.ReadFile(spec) //nolint:gosec // G304: the user names the file to read
		if err != nil {
			return nil, fmt.Errorf("-o custom-columns-file: %w", err)
		}
		// kubectl's file form: a line of headers, a line of JSONPaths, split on spaces.
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 {
			return nil, fmt.Errorf("-o custom-columns-file=%s: want two lines (headers, then JSONPaths), got %d", spec, len(lines))
		}
		headers, paths := strings.Fields(lines[0]), strings.Fields(lines[1])
		if len(headers) != len(paths) {
			return nil, fmt.Errorf("-o custom-columns-file=%s: %d headers but %d JSONPaths", spec, len(headers), len(paths))
		}
		var pairs []string
		for i := range headers {
			pairs = append(pairs, headers[i]+":"+paths[i])
		}
		spec = strings.Join(pairs, ",")
	} else {
		spec = strings.TrimPrefix(format, "custom-columns=")
	}
	if spec == "" {
		return nil, fmt.Errorf("-o custom-columns= needs HEADER:JSONPATH pairs, e.g. -o custom-columns=NAME:.metadata.name,PHASE:.status.phase")
	}
	var cols []customColumn
	for _, pair := range strings.Split(spec, ",") {
		header, expr, ok := strings.Cut(pair, ":")
		if !ok || header == "" || expr == "" {
			return nil, fmt.Errorf("-o custom-columns: %q is not HEADER:JSONPATH (e.g. PHASE:.status.phase)", pair)
		}
		p := jsonpath.New(header).AllowMissingKeys(true)
		if err := p.Parse(relaxedJSONPath(expr)); err != nil {
			return nil, fmt.Errorf("-o custom-columns: column %s: %w", header, err)
		}
		cols = append(cols, customColumn{header: header, path: p})
	}
	return cols, nil
}

// relaxedJSONPath accepts .status.phase, status.phase and {.status.phase}, as kubectl does.
func relaxedJSONPath(expr string) string {
	expr = strings.TrimSuffix(strings.TrimPrefix(expr, "{"), "}")
	if !strings.HasPrefix(expr, ".") {
		expr = "." + expr
	}
	return "{" + expr + "}"
}

func (p *runPrinter) printColumns(w io.Writer, runs []*run) error {
	tw := printers.GetNewTabWriter(w)
	if !p.o.noHeaders && !p.printedHeader {
		var hs []string
		for _, c := range p.columns {
			hs = append(hs, c.header)
		}
		fmt.Fprintln(tw, strings.Join(hs, "\t"))
		p.printedHeader = true
	}
	for _, r := range runs {
		u, err := toUnstructured(r)
		if err != nil {
			return err
		}
		var cells []string
		for _, c := range p.columns {
			results, err := c.path.FindResults(u.Object)
			if err != nil {
				return fmt.Errorf("-o custom-columns: column %s: %w", c.header, err)
			}
			var vals []string
			for _, rs := range results {
				for _, v := range rs {
					var b bytes.Buffer
					if err := c.path.PrintResults(&b, []reflect.Value{v}); err != nil {
						return err
					}
					vals = append(vals, b.String())
				}
			}
			cells = append(cells, none(strings.Join(vals, ",")))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}
