package wiring

import (
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/libs/config"
)

func TestConfigDefaultsAndValues(t *testing.T) {
	c, err := LoadConfig(config.FromMap(nil), []string{"agents"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Enabled || c.Timeout != time.Minute || c.Workers != 4 {
		t.Errorf("defaults %+v", c)
	}
	c, err = LoadConfig(config.FromMap(map[string]string{EnvEnabled: "false", EnvTimeout: "1500"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Enabled || c.Timeout != 1500*time.Millisecond {
		t.Errorf("parsed %+v", c)
	}
}

// Every bad value is refused at start-up, all at once, each by the variable's name.
func TestConfigRefusesBadValuesByName(t *testing.T) {
	_, err := LoadConfig(config.FromMap(map[string]string{EnvEnabled: "maybe", EnvTimeout: "0", EnvWorkers: "-1"}), nil)
	if err == nil {
		t.Fatal("bad values accepted")
	}
	for _, want := range []string{EnvEnabled + `="maybe"`, EnvTimeout + `="0"`, EnvWorkers + `="-1"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}
