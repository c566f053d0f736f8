//go:build !integration

package wiring

import (
	"testing"

	"github.com/agentplane/agentplane/libs/testenv"
)

// TestMain fails the package when a unit test leaves a goroutine running (the integration build's
// TestMain checks the same after stopping its shared parts).
func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }
