package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spectrocloud/nodewright/internal/testenv"
)

// TestDemoRefusesWideOperatorAddresses: the operator's addresses can be moved, but not off
// loopback, and the refusal comes before anything is started; so does the refusal of a
// patience that is not a number of seconds.
func TestDemoRefusesWideOperatorAddresses(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const wide = "must be 127.0.0.1:PORT (PORT 1-65535): the local site listens on loopback only"
	const impatient = "must be a whole number of seconds from 1 to 999999 (the limit of each wait for the site)"
	for _, tc := range []struct{ variable, value, reason string }{
		{"NODEWRIGHT_DEMO_PROBE_ADDR", "0.0.0.0:18081", wide},
		{"NODEWRIGHT_DEMO_PROBE_ADDR", ":18081", wide},
		{"NODEWRIGHT_DEMO_METRICS_ADDR", "192.0.2.1:18080", wide},
		{"NODEWRIGHT_DEMO_METRICS_ADDR", "[::]:18080", wide},
		{"NODEWRIGHT_DEMO_METRICS_ADDR", "127.0.0.1:0", wide},
		{"NODEWRIGHT_DEMO_PROBE_ADDR", "127.0.0.1:65536", wide},
		{"NODEWRIGHT_DEMO_PROBE_ADDR", "127.0.0.1:80x", wide},
		{"NODEWRIGHT_DEMO_PROBE_ADDR", "127.0.0.10:18081", wide},
		{"NODEWRIGHT_DEMO_PATIENCE", "5m", impatient},
		{"NODEWRIGHT_DEMO_PATIENCE", "0", impatient},
	} {
		for _, verb := range []string{"up", "upgrade"} {
			t.Run(verb+" "+tc.variable+"="+tc.value, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "site")
				env := append(os.Environ(),
					"NODEWRIGHT_DEMO_DIR="+dir,
					fmt.Sprintf("NODEWRIGHT_DEMO_NAME=nodewright-e2e-refused-%d", os.Getpid()),
					tc.variable+"="+tc.value)
				// Should the script ever start the site despite the address, take it down again.
				t.Cleanup(func() {
					if _, err := os.Stat(dir); err == nil {
						down := exec.Command(filepath.Join(root, "hack", "demo.sh"), "down")
						down.Env = env
						_ = down.Run()
					}
				})
				// The refusal is at once; the deadline only keeps a script that went on from
				// holding the suite.
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "demo.sh"), verb)
				cmd.Env = env
				out, err := cmd.CombinedOutput()
				want := "demo: FAILED: " + tc.variable + "=" + tc.value + ": " + tc.reason
				if err == nil || strings.TrimSpace(string(out)) != want {
					t.Errorf("hack/demo.sh %s: err %v, output:\n%s\nwant only: %s", verb, err, out, want)
				}
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Errorf("hack/demo.sh %s made the site's folder before refusing %s", verb, tc.variable)
				}
			})
		}
	}
}
