package cli

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Exit codes, documented in agentctl --help. Scripts and CI gates rely on them.
const (
	// ExitOK: done; for status, every component healthy (unknown and configured count as fine).
	ExitOK = 0
	// ExitError: anything not below.
	ExitError = 1
	// ExitUsage: a bad flag, argument or kubeconfig.
	ExitUsage = 2
	// ExitUnhealthy: a component is degraded or in error (status, diagnose), or status wait
	// timed out before the control plane was healthy.
	ExitUnhealthy = 3
	// ExitAccess: the gateway or the API server refused the credentials (UNAUTHENTICATED,
	// PERMISSION_DENIED, HTTP 401 or 403).
	ExitAccess = 4
	// ExitRejected: the request cannot succeed by retrying (INVALID_ARGUMENT,
	// FAILED_PRECONDITION such as a namespace the gateway does not serve, UNIMPLEMENTED, NOT_FOUND,
	// HTTP 400, 404 or 501).
	ExitRejected = 5
	// ExitUnavailable: the stream stayed unavailable until --timeout, or broke with --retry=false;
	// a watch of runs ended.
	ExitUnavailable = 6
	// ExitRunFailed: the run waited for ended Failed (wait; submit, retry and resubmit with
	// --wait or --watch).
	ExitRunFailed = 7
	// ExitRunCancelled: the run waited for ended Cancelled.
	ExitRunCancelled = 8
	// ExitTimedOut: --timeout passed before the run reached what was waited for (wait, --wait,
	// cancel --wait).
	ExitTimedOut = 9
	// ExitUnreachable: the run ended Succeeded without reaching what wait --for asked.
	ExitUnreachable = 10
)

const exitCodesHelp = `Exit codes:
  0  done; for status and diagnose, every component is healthy (unknown and configured count as healthy)
  1  an unexpected error
  2  bad usage: a flag, an argument or the kubeconfig
  3  a component is degraded or in error (status, diagnose; --exit-code=false turns this off),
     or status wait timed out before the control plane was healthy
  4  access refused: the credentials were not accepted (UNAUTHENTICATED, 401) or not allowed
     (PERMISSION_DENIED, 403)
  5  the request was rejected and retrying cannot help (INVALID_ARGUMENT, FAILED_PRECONDITION,
     UNIMPLEMENTED, NOT_FOUND; 400, 404, 501)
  6  the status stream stayed unavailable until --timeout, or broke with --retry=false; a watch of
     runs was ended by the API server
  7  the run waited for (wait, --wait, --watch) ended Failed
  8  the run waited for ended Cancelled
  9  --timeout passed before the run got there (wait, --wait, cancel --wait)
  10 the run ended Succeeded without reaching what wait --for asked`

// runExitCodesHelp is the part of the exit codes the run verbs use.
const runExitCodesHelp = `Exit codes: 0 done; 1 an unexpected error; 2 bad usage (a flag, an argument, the kubeconfig, a
name both kinds have); 4 the API server refused the credentials or the access; 5 rejected (not
found, invalid); 6 a watch was ended by the API server; with --wait or --watch (and for wait): 7
the run ended Failed, 8 it ended Cancelled, 9 --timeout passed first, 10 it ended Succeeded
without reaching what wait --for asked.`

// exitError carries an exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// exitCode returns the code err should end the process with.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return ExitError
}

// permanent reports whether err cannot get better by retrying, and if so returns it as an
// error with its exit code and a message that says what to do.
func permanent(err error, server string) (error, bool) {
	if err == nil {
		return nil, false
	}
	var e *exitError
	if errors.As(err, &e) {
		return err, e.code != ExitUnavailable
	}
	if s, ok := status.FromError(err); ok {
		msg := s.Message()
		switch s.Code() {
		case codes.Unauthenticated:
			return withCode(ExitAccess, fmt.Errorf("watch-gateway at %s did not accept the credentials (UNAUTHENTICATED): %s; "+
				"pass a token issued for its audience (kubectl create token NAME --audience agentplane-gateway) with --gateway-token-file or --gateway-token (AGENTCTL_TOKEN), "+
				"or a client certificate with --tls-cert/--tls-key", server, msg)), true
		case codes.PermissionDenied:
			return withCode(ExitAccess, fmt.Errorf("watch-gateway at %s refused access (PERMISSION_DENIED): %s", server, msg)), true
		case codes.InvalidArgument:
			return withCode(ExitRejected, fmt.Errorf("watch-gateway at %s rejected the request (INVALID_ARGUMENT): %s", server, msg)), true
		case codes.FailedPrecondition:
			return withCode(ExitRejected, fmt.Errorf("watch-gateway at %s cannot serve this watch (FAILED_PRECONDITION): %s", server, msg)), true
		case codes.Unimplemented:
			return withCode(ExitRejected, fmt.Errorf("watch-gateway at %s does not implement this call (UNIMPLEMENTED): %s; "+
				"is --gateway the watch-gateway's gRPC port? --fallback-poll polls the one-shot status instead", server, msg)), true
		case codes.NotFound:
			return withCode(ExitRejected, fmt.Errorf("watch-gateway at %s: %s (NOT_FOUND)", server, msg)), true
		}
		return err, false
	}
	switch {
	case apierrors.IsUnauthorized(err):
		return withCode(ExitAccess, fmt.Errorf("the API server did not accept the kubeconfig's credentials: %w", err)), true
	case apierrors.IsForbidden(err):
		return withCode(ExitAccess, fmt.Errorf("the API server refused access: %w (check your RBAC with kubectl auth can-i)", err)), true
	case apierrors.IsBadRequest(err), apierrors.IsNotFound(err), apierrors.IsInvalid(err):
		return withCode(ExitRejected, err), true
	}
	return err, false
}
