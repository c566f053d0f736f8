package cli

import (
	"testing"

	"github.com/agentplane/agentplane/libs/testenv"
)

// TestMain fails the package when a test leaves a goroutine running (a watch stream, a server).
func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }
