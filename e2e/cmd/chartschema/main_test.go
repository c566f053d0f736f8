package main

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestMergeKeepsBothPropertiesAndOnlyTheChartsRequired: an object the library and the chart both
// describe gets the properties of both; required lists come from the chart's side only (the
// library's defaults are imported, which helm lint does not see).
func TestMergeKeepsBothPropertiesAndOnlyTheChartsRequired(t *testing.T) {
	var lib, own any
	if err := json.Unmarshal([]byte(`{"type":"object","required":["tag"],"properties":{"tag":{"type":"string"},"pullPolicy":{"type":"string"}}}`), &lib); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"type":"object","additionalProperties":false,"required":["repository"],"properties":{"repository":{"type":"string","minLength":1}}}`), &own); err != nil {
		t.Fatal(err)
	}
	got := merge(lib, own)
	var want any
	if err := json.Unmarshal([]byte(`{"type":"object","additionalProperties":false,"required":["repository"],"properties":{
		"tag":{"type":"string"},"pullPolicy":{"type":"string"},"repository":{"type":"string","minLength":1}}}`), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		t.Fatalf("merge = %s", g)
	}
}
