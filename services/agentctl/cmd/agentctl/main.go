// Command agentctl operates an agentplane control plane from the terminal.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentplane/agentplane/services/agentctl/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
