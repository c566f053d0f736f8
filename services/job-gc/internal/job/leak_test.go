package job

import (
	"testing"

	"github.com/agentplane/agentplane/libs/testenv"
)

// TestMain fails the package when a test leaves a goroutine running (the package has no
// integration tests, so this TestMain is the one of both builds).
func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }
