package ui_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/testenv"
	"github.com/spectrocloud/nodewright/internal/ui"
)

// TestTrailFolderThatDoesNotExistYet starts the UI on a trail folder that is not there yet:
// the audit page and the log say so, rather than the page silently never updating; once the
// folder appears and records are written, the page shows them.
func TestTrailFolderThatDoesNotExistYet(t *testing.T) {
	startOperator(t)
	ns := env.Namespace(t)
	dir := filepath.Join(t.TempDir(), "later", "audit")
	log := &testenv.SyncBuffer{}
	url := startUI(t, ui.Options{Namespace: ns, TrailDir: dir, Log: log})
	p := openPage(t, url, laptopWidth, laptopHeight)
	p.goTo("audit")
	p.waitJS("the audit page to say the folder does not exist and that it will update",
		`(() => { const t = document.getElementById('page-audit').innerText; return t.includes('does not exist') && t.includes('once it does'); })()`)
	if got := log.String(); !strings.Contains(got, dir) || !strings.Contains(got, "does not exist") {
		t.Errorf("the log says %q", got)
	}

	// The folder appears, with records: the page follows.
	priv, _, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.LoadSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := audit.OpenFileSink(dir, audit.FileSinkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	trail := audit.NewLog(sink, signer, sink.State(), audit.LogOptions{})
	t.Cleanup(func() { _ = trail.Close(); _ = sink.Close() })
	subject := audit.Subject{APIVersion: "nodewright.spectrocloud.com/v1alpha1", Kind: "VMVolumeMigration", Namespace: ns, Name: "late", UID: types.UID("uid-late")}
	if _, err := trail.Append(context.Background(), audit.Transition(subject, user, "MigrationTransition", "Pending", "Running", "Started", "written after the UI started", "", time.Now())); err != nil {
		t.Fatal(err)
	}
	p.waitJS("the record written once the folder appeared",
		`[...document.querySelectorAll('#trail-records tr')].some((r) => r.innerText.includes('written after the UI started'))`)
	if got := p.text("#page-audit"); strings.Contains(got, "does not exist") {
		t.Errorf("the page still says the folder does not exist:\n%s", got)
	}
}
