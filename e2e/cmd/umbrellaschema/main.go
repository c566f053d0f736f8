// Command umbrellaschema writes charts/agentplane/values.schema.json from the six service charts'
// schemas, so that the one-release chart checks every value by the same bounds as the chart that
// owns it, with no hand-kept copy:
//
//   - <service>: that chart's schema, plus `enabled`, with every `required` list dropped (a block
//     in the umbrella's values only overrides the chart's defaults, so any part of it may be
//     given);
//   - the seeds' top-level paths (controller, grpc, rbac, image, imagePullSecrets, logLevel,
//     logFormat, otel, redis, env.vars, controllers.*, controlPlane.env.vars): the union of the
//     same value's schema across the charts that have it (the umbrella applies each to those
//     charts only);
//   - crds.enabled, runs.* and global.
//
// `make generate` runs it; `make verify-gen` fails when the file is stale.
//
//	go run ./cmd/umbrellaschema CHARTS_DIR
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Services in the order the umbrella renders them.
var services = []string{"status-writer", "event-emitter", "job-gc", "cancel-propagator", "run-controller", "watch-gateway"}

// shared are the top-level values the umbrella hands to every chart that has the same value.
var shared = []string{"controller", "grpc", "rbac", "imagePullSecrets", "logLevel", "logFormat", "otel", "redis",
	"orchestrationController", "supportingController"}

type schema = map[string]any

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: umbrellaschema CHARTS_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "umbrellaschema:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	out, err := build(func(svc string) (schema, error) {
		b, err := os.ReadFile(filepath.Join(dir, svc, "values.schema.json"))
		if err != nil {
			return nil, err
		}
		var s schema
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s/values.schema.json: %w", svc, err)
		}
		return s, nil
	})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "agentplane", "values.schema.json"), buf.Bytes(), 0o644)
}

func build(load func(svc string) (schema, error)) (schema, error) {
	props := schema{}
	union := map[string]schema{}
	var envVars, image schema
	for _, svc := range services {
		s, err := load(svc)
		if err != nil {
			return nil, err
		}
		p, _ := s["properties"].(schema)
		if p == nil {
			return nil, fmt.Errorf("%s: the schema has no properties", svc)
		}
		for _, k := range shared {
			v, ok := p[k].(schema)
			if !ok {
				continue
			}
			union[k] = merge(union[k], v)
		}
		if envVars == nil {
			envVars = dig(p, "env", "vars")
		}
		if image == nil {
			image, _ = p["image"].(schema)
		}
		own := dropRequired(s).(schema)
		delete(own, "$schema")
		delete(own, "title")
		op := own["properties"].(schema)
		op["enabled"] = schema{"type": "boolean", "description": "install " + svc + " with this release"}
		own["description"] = "the " + svc + " chart's values (charts/" + svc + "/values.yaml), any part of them; what is set here wins over the top-level values"
		props[svc] = own
	}
	if envVars == nil || image == nil {
		return nil, fmt.Errorf("no chart has env.vars or image in its schema")
	}
	for _, k := range shared {
		u := union[k]
		if u == nil {
			return nil, fmt.Errorf("no chart has %q in its schema", k)
		}
		u = dropRequired(u).(schema)
		u["description"] = "applies to every chart that has " + k + " (see README), unless that chart's own block sets it"
		props[k] = u
	}
	ip := schema{}
	for _, k := range []string{"registry", "tag", "pullPolicy"} {
		if v, ok := dig(image, "properties")[k]; ok {
			ip[k] = v
		}
	}
	props["image"] = schema{"type": "object", "additionalProperties": false, "properties": ip,
		"description": "registry, tag and pullPolicy of every service image (each chart keeps its repository; digests are per chart)"}
	vars := func(who string) schema {
		return schema{"type": "object", "additionalProperties": false, "properties": schema{"vars": with(envVars, "description", "environment variables for "+who)}}
	}
	props["env"] = vars("every service")
	props["controllers"] = schema{"type": "object", "additionalProperties": false, "properties": schema{
		"enabled": schema{"type": "boolean", "description": "the seeds' controllers.enabled: false leaves out run-controller, job-gc and cancel-propagator"},
		"env":     vars("the controller side: status-writer, event-emitter, job-gc, cancel-propagator and run-controller (over env.vars)"),
	}}
	props["controlPlane"] = schema{"type": "object", "additionalProperties": false, "properties": schema{
		"env": vars("the control plane's stream: watch-gateway (over env.vars)"),
	}}
	props["crds"] = schema{"type": "object", "additionalProperties": false, "properties": schema{
		"enabled": schema{"type": "boolean", "description": "install the agentplane-crds chart's CRDs with this release"},
	}}
	props["runs"] = schema{"type": "object", "additionalProperties": false, "properties": schema{
		"namespace":       schema{"type": "string", "description": "where runs live when controller.namespaces is unset (default <release namespace>-runs; an upgrade keeps the namespaces the release runs in)"},
		"createNamespace": schema{"type": "boolean", "description": "create runs.namespace (kept on uninstall, with its runs)"},
	}}
	crds, err := load("agentplane-crds")
	if err != nil {
		return nil, err
	}
	// A subchart's block: its schema without required lists (its own values.yaml fills them).
	crdsBlock := dropRequired(clone(crds)).(schema)
	delete(crdsBlock, "$schema")
	crdsBlock["description"] = "the agentplane-crds chart's values: its admission policies"
	props["agentplane-crds"] = crdsBlock
	props["global"] = schema{"type": "object", "description": "values Helm passes to every chart (unused by agentplane's)"}
	return schema{
		"$schema":              "https://json-schema.org/draft-07/schema#",
		"title":                "agentplane (one release: the CRDs and the six services); generated by make generate from the service charts' schemas",
		"type":                 "object",
		"additionalProperties": false,
		"properties":           props,
	}, nil
}

// merge returns the union of two object schemas: every property of either (a's wins where both
// have it, recursively for objects).
func merge(a, b schema) schema {
	if a == nil {
		return clone(b)
	}
	ap, _ := a["properties"].(schema)
	bp, _ := b["properties"].(schema)
	for k, v := range bp {
		av, ok := ap[k].(schema)
		if !ok {
			ap[k] = clone(v.(schema))
			continue
		}
		if bv, ok := v.(schema); ok && av["type"] == "object" && bv["type"] == "object" && av["properties"] != nil {
			ap[k] = merge(av, bv)
		}
	}
	return a
}

func clone(s schema) schema {
	b, _ := json.Marshal(s)
	var out schema
	_ = json.Unmarshal(b, &out)
	return out
}

func with(s schema, k string, v any) schema {
	out := clone(s)
	out[k] = v
	return out
}

func dig(s schema, path ...string) schema {
	for _, p := range path {
		if props, ok := s["properties"].(schema); ok && p != "properties" {
			s, _ = props[p].(schema)
		} else {
			s, _ = s[p].(schema)
		}
		if s == nil {
			return nil
		}
	}
	return s
}

// dropRequired removes every "required" list, at any depth (but in an "if").
func dropRequired(v any) any {
	switch t := v.(type) {
	case schema:
		out := schema{}
		for k, x := range t {
			switch k {
			case "required":
				continue
			case "if": // a condition's required list is what it tests: kept as it is
				out[k] = x
				continue
			}
			out[k] = dropRequired(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = dropRequired(x)
		}
		return out
	}
	return v
}
