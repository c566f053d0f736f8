package testenv

import "testing"

// TestMain fails the package when a test leaves a goroutine running.
func TestMain(m *testing.M) { VerifyNoLeaks(m) }
