package redisx

import (
	"strings"
	"testing"
	"time"
)

func TestNew(t *testing.T) {
	c, err := New("redis://:in-url@127.0.0.1:6390/2", "from-secret", Options{Timeout: 50 * time.Millisecond, PoolSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := c.Options()
	if o.Addr != "127.0.0.1:6390" || o.DB != 2 || o.Password != "from-secret" || o.ReadTimeout != 50*time.Millisecond || o.PoolSize != 7 || o.MaxRetries > 0 || o.DialerRetries != 1 {
		t.Fatalf("options = %+v", o)
	}
	_, err = New("http://user:hunter2@host", "", Options{})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad URL error %v must not repeat the URL", err)
	}
}
