// Package config reads service configuration from the environment. Every reader records what
// was wrong instead of failing at the first bad value, so an operator sees all mistakes at once.
package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Env reads typed values from environment variables and collects parse errors.
type Env struct {
	lookup func(string) (string, bool)
	errs   []error
}

// FromOS reads the process environment.
func FromOS() *Env { return &Env{lookup: os.LookupEnv} }

// FromMap reads a fixed map; tests use it instead of mutating the process environment.
func FromMap(m map[string]string) *Env {
	return &Env{lookup: func(k string) (string, bool) { v, ok := m[k]; return v, ok }}
}

func (e *Env) raw(name string) (string, bool) {
	v, ok := e.lookup(name)
	if !ok {
		return "", false
	}
	v = strings.TrimSpace(v)
	return v, v != ""
}

// Fail records that variable name holds value, which is not want ("a port between 0 and
// 65535"); Err reports it with the others.
func (e *Env) Fail(name, value, want string) { e.fail(name, value, want) }

func (e *Env) fail(name, value, want string) {
	e.errs = append(e.errs, fmt.Errorf("%s=%q is not %s", name, value, want))
}

// String returns the variable's value, or def when it is unset or empty.
func (e *Env) String(name, def string) string {
	if v, ok := e.raw(name); ok {
		return v
	}
	return def
}

// Secret returns the variable's value like String; parse errors never echo it.
func (e *Env) Secret(name string) string {
	v, _ := e.lookup(name)
	return v
}

// Int returns the variable as an integer.
func (e *Env) Int(name string, def int) int {
	v, ok := e.raw(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.fail(name, v, "a whole number")
		return def
	}
	return n
}

// Bool accepts true/false, 1/0, yes/no and on/off.
func (e *Env) Bool(name string, def bool) bool {
	v, ok := e.raw(name)
	if !ok {
		return def
	}
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true
	case "0", "false", "no", "off":
		return false
	}
	e.fail(name, v, "a boolean (true or false)")
	return def
}

// Duration accepts Go durations ("30s", "5m").
func (e *Env) Duration(name string, def time.Duration) time.Duration {
	v, ok := e.raw(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		e.fail(name, v, `a non-negative duration such as "30s"`)
		return def
	}
	return d
}

// Millis reads a whole number of milliseconds, as the seeds' *_MS variables do.
func (e *Env) Millis(name string, def time.Duration) time.Duration {
	v, ok := e.raw(name)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		e.fail(name, v, "a non-negative number of milliseconds")
		return def
	}
	return time.Duration(n) * time.Millisecond
}

// List splits a comma-separated value, dropping empty items.
func (e *Env) List(name string, def []string) []string {
	v, ok := e.raw(name)
	if !ok {
		return def
	}
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Err reports every value that could not be parsed, or nil.
func (e *Env) Err() error {
	if len(e.errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid configuration: %w", errors.Join(e.errs...))
}
