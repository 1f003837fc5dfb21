package testenv

import (
	"testing"
	"time"
)

// Eventually polls check until it returns "", and fails the test with check's last message
// once timeout has passed. Give it a limit only a stuck test reaches: a passing test goes on
// as soon as the state holds.
func Eventually(t testing.TB, timeout time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		last := check()
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
