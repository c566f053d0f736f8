package cancel

import (
	"testing"

	"github.com/agentplane/agentplane/libs/testenv"
)

// TestMain fails the package when a test leaves a goroutine running (the package has no
// integration tests: the same TestMain serves both builds).
func TestMain(m *testing.M) { testenv.VerifyNoLeaks(m) }
