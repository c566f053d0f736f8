package wiring

import (
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/libs/config"
)

func TestConfigDefaultsAreTheSeeds(t *testing.T) {
	c, err := LoadConfig(config.FromMap(nil), []string{"agents"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Retention != 30*24*time.Hour || c.MissingGrace != time.Minute || c.HoldWarning != time.Hour || c.Workers != 4 || c.ArchiveRetention != 90*24*time.Hour {
		t.Errorf("defaults %+v", c)
	}
	c, err = LoadConfig(config.FromMap(map[string]string{EnvRetention: "0", EnvMissingGrace: "5", EnvHoldWarning: "60", EnvWorkers: "2", EnvArchiveKeep: "0"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Retention != 0 || c.MissingGrace != 5*time.Second || c.HoldWarning != time.Minute || c.Workers != 2 || c.ArchiveRetention != 0 {
		t.Errorf("parsed %+v", c)
	}
}

// Every bad value is refused at start-up, all at once, each by the variable's name.
func TestConfigRefusesBadValuesByName(t *testing.T) {
	_, err := LoadConfig(config.FromMap(map[string]string{
		EnvRetention: "-1", EnvMissingGrace: "0", EnvHoldWarning: "soon", EnvWorkers: "0", EnvArchiveKeep: "-5",
	}), nil)
	if err == nil {
		t.Fatal("bad values accepted")
	}
	for _, want := range []string{EnvRetention + `="-1"`, EnvMissingGrace + `="0"`, EnvHoldWarning + `="soon"`, EnvWorkers + `="0"`, EnvArchiveKeep + `="-5"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}
