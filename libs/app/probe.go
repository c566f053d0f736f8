package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Probe is every service binary's `probe` subcommand, what the charts' `helm test` pod runs:
// it asks ADDRESS's grpc.health.v1 for SERVICE (the server as a whole when empty) and exits 0
// when it answers SERVING, 1 when it answers anything else or not at all, 2 on bad arguments.
//
// With --watches N it opens N Watch streams at once instead, holds each until it has answered,
// and exits 0 when all of them did, 1 when the server refused one (it bounds the watches one
// address may hold: grpcx.HealthWatchPerAddress).
//
//	<service> probe [--tls] [--ca-file F] [--server-name N] [--cert-file F --key-file F] [--timeout 10s] [--watches N] ADDRESS [SERVICE]
func Probe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	useTLS := fs.Bool("tls", false, "connect with TLS")
	caFile := fs.String("ca-file", "", "CA bundle that signed the server's certificate (with --tls; default: the system's)")
	serverName := fs.String("server-name", "", "name to verify in the server's certificate (with --tls; default: the address's host)")
	certFile := fs.String("cert-file", "", "client certificate, for a server that requires one (mTLS; implies --tls)")
	keyFile := fs.String("key-file", "", "the client certificate's key")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the answer")
	watches := fs.Int("watches", 0, "open this many Watch streams at once, each held until it answers, instead of one Check")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: probe [--tls] [--ca-file F] [--server-name N] [--cert-file F --key-file F] [--timeout 10s] [--watches N] ADDRESS [SERVICE]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() < 1 || fs.NArg() > 2 || *timeout <= 0 || *watches < 0 || (*certFile == "") != (*keyFile == "") {
		fs.Usage()
		return 2
	}
	addr, svc := fs.Arg(0), fs.Arg(1)
	creds := insecure.NewCredentials()
	if *useTLS || *caFile != "" || *certFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: *serverName}
		if *caFile != "" {
			pem, err := os.ReadFile(*caFile)
			if err != nil {
				fmt.Fprintf(stderr, "probe: read --ca-file: %v\n", err)
				return 2
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				fmt.Fprintf(stderr, "probe: --ca-file %s holds no PEM certificate\n", *caFile)
				return 2
			}
		}
		if *certFile != "" {
			cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
			if err != nil {
				fmt.Fprintf(stderr, "probe: load --cert-file/--key-file: %v\n", err)
				return 2
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintf(stderr, "probe: %s: %v\n", addr, err)
		return 2
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *watches > 0 {
		return probeWatches(ctx, healthpb.NewHealthClient(conn), addr, svc, *watches, stdout, stderr)
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc}, grpc.WaitForReady(true))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			fmt.Fprintf(stderr, "probe: %s did not answer within %s: %v\n", addr, *timeout, err)
		} else {
			fmt.Fprintf(stderr, "probe: %s: %v\n", addr, err)
		}
		return 1
	}
	what := addr
	if svc != "" {
		what += " " + svc
	}
	fmt.Fprintf(stdout, "%s: %s\n", what, resp.GetStatus())
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return 1
	}
	return 0
}

// probeWatches opens n Watch streams on one connection and holds them all until it returns: the
// first one the server refuses (or that does not answer) ends the probe with 1.
func probeWatches(ctx context.Context, client healthpb.HealthClient, addr, svc string, n int, stdout, stderr io.Writer) int {
	for i := 1; i <= n; i++ {
		stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: svc}, grpc.WaitForReady(true))
		if err == nil {
			_, err = stream.Recv()
		}
		if err != nil {
			fmt.Fprintf(stderr, "probe: %s: watch %d of %d refused, %d held: %v\n", addr, i, n, i-1, err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "%s: %d watches held\n", addr, n)
	return 0
}
