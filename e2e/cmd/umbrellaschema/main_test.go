package main

import (
	"encoding/json"
	"testing"
)

func TestBuild(t *testing.T) {
	charts := map[string]string{
		"status-writer": `{"type":"object","required":["grpc"],"properties":{"grpc":{"type":"object","required":["port"],"properties":{"port":{"type":"integer","minimum":1},"enabled":{"type":"boolean"}}},
			"controller":{"type":"object","properties":{"namespaces":{"type":"array"}}},"env":{"type":"object","properties":{"vars":{"type":"object"}}},
			"image":{"type":"object","properties":{"registry":{"type":"string"},"repository":{"type":"string"},"tag":{"type":"string"},"pullPolicy":{"enum":["Always"]}}},
			"rbac":{"type":"object"},"imagePullSecrets":{"type":"array"},"logLevel":{"enum":["info"]},"logFormat":{"enum":["json"]},"otel":{"type":"object"}}}`,
		"event-emitter":     `{"type":"object","properties":{"redis":{"type":"object","properties":{"url":{"type":"string"}}}}}`,
		"job-gc":            `{"type":"object","properties":{"controller":{"type":"object","properties":{"agentRunRetentionSeconds":{"type":"integer","minimum":0}}}}}`,
		"cancel-propagator": `{"type":"object","properties":{}}`,
		"run-controller": `{"type":"object","properties":{"controller":{"type":"object","properties":{"workers":{"type":"integer","minimum":1},"namespaces":{"type":"string"}}},
			"orchestrationController":{"type":"object","properties":{"enabled":{"type":"boolean"}}},"supportingController":{"type":"object","properties":{"enabled":{"type":"boolean"}}}}}`,
		"watch-gateway":   `{"type":"object","properties":{}}`,
		"agentplane-crds": `{"$schema":"x","type":"object","required":["admission"],"properties":{"admission":{"type":"object","required":["enabled"],"properties":{"enabled":{"type":"boolean"}}}}}`,
	}
	out, err := build(func(svc string) (schema, error) {
		var s schema
		return s, json.Unmarshal([]byte(charts[svc]), &s)
	})
	if err != nil {
		t.Fatal(err)
	}
	props := out["properties"].(schema)
	// A service block is its chart's schema, with enabled and without required lists.
	sw := props["status-writer"].(schema)
	if sw["required"] != nil || dig(sw, "grpc")["required"] != nil {
		t.Errorf("required lists kept: %v", sw)
	}
	if dig(sw, "enabled")["type"] != "boolean" || dig(sw, "grpc", "port")["minimum"] != 1.0 {
		t.Errorf("status-writer block %v", sw)
	}
	// The CRDs chart's block is its schema, without required lists.
	crds := props["agentplane-crds"].(schema)
	if crds["required"] != nil || crds["$schema"] != nil || dig(crds, "admission", "enabled")["type"] != "boolean" || dig(crds, "admission")["required"] != nil {
		t.Errorf("agentplane-crds block %v", crds)
	}
	// The top-level controller is the union of the charts' (the first chart's wins on a clash).
	c := dig(out, "controller")
	if dig(c, "agentRunRetentionSeconds")["minimum"] != 0.0 || dig(c, "workers")["minimum"] != 1.0 || dig(c, "namespaces")["type"] != "array" {
		t.Errorf("controller union %v", c)
	}
	// The seeds' keys the charts refuse with a message (grpc.enabled=false, ...) reach them.
	if dig(out, "grpc", "enabled")["type"] != "boolean" || dig(out, "orchestrationController", "enabled")["type"] != "boolean" || dig(out, "redis", "url")["type"] != "string" {
		t.Errorf("grpc or redis: %v %v", dig(out, "grpc"), dig(out, "redis"))
	}
	if _, ok := dig(out, "image")["properties"].(schema)["repository"]; ok {
		t.Error("the top-level image takes a repository; each chart keeps its own")
	}
	if out["additionalProperties"] != false {
		t.Error("unknown top-level keys are accepted")
	}
	// A chart without a shared key is an error only when no chart has it.
	delete(charts, "event-emitter")
	charts["event-emitter"] = `{"type":"object","properties":{}}`
	if _, err := build(func(svc string) (schema, error) {
		var s schema
		return s, json.Unmarshal([]byte(charts[svc]), &s)
	}); err == nil {
		t.Error("no chart has redis, and build did not say so")
	}
}

func TestDropRequiredKeepsConditions(t *testing.T) {
	in := schema{"required": []any{"a"}, "if": schema{"required": []any{"b"}}, "properties": schema{"x": schema{"required": []any{"c"}}}}
	out := dropRequired(in).(schema)
	if out["required"] != nil || dig(out, "x")["required"] != nil {
		t.Errorf("required kept: %v", out)
	}
	if out["if"].(schema)["required"] == nil {
		t.Errorf("an if's required list was dropped: %v", out)
	}
}
