// Command registry is the CNCF Distribution registry (github.com/distribution/distribution/v3)
// serving one storage folder on several addresses. `make cluster-up` runs it as the local
// cluster's OCI registry: on 127.0.0.1, where `docker push` and `helm push` reach it as a
// local (plain-HTTP) registry, and on the host's address on the node link, where the node's
// containerd pulls from it. Distribution's own command listens on one address only.
//
//	registry -root DIR -listen 127.0.0.1:5000 -listen 10.250.0.1:5000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

type addrs []string

func (a *addrs) String() string     { return strings.Join(*a, ",") }
func (a *addrs) Set(v string) error { *a = append(*a, v); return nil }

func main() {
	var listen addrs
	root := flag.String("root", "", "folder the registry stores blobs and manifests in")
	flag.Var(&listen, "listen", "address to serve on (repeatable)")
	flag.Parse()
	if *root == "" || len(listen) == 0 {
		fmt.Fprintln(os.Stderr, "usage: registry -root DIR -listen HOST:PORT [-listen HOST:PORT ...]")
		os.Exit(2)
	}
	if err := run(*root, listen); err != nil {
		log.Fatalf("registry: %v", err)
	}
}

func run(root string, listen []string) error {
	cfg, err := configuration.Parse(strings.NewReader(fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: true
http:
  addr: %q
`, root, listen[0])))
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	app := handlers.NewApp(ctx, cfg)
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	errs := make(chan error, len(listen))
	var lc net.ListenConfig
	for _, a := range listen {
		ln, err := lc.Listen(ctx, "tcp", a)
		if err != nil {
			return err
		}
		log.Printf("registry: serving %s on http://%s", root, a)
		go func() { errs <- srv.Serve(ln) }()
	}
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return app.Shutdown()
}
