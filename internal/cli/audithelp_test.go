package cli

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spectrocloud/nodewright/internal/audit"
	"github.com/spectrocloud/nodewright/internal/operator"
)

// Following the help's example gives the checkpoint the operator publishes: its jsonpath reads
// the key the operator writes, in the ConfigMap the operator writes by default, and the file
// it makes verifies the trail as a trusted checkpoint.
func TestAuditVerifyHelpReadsThePublishedCheckpoint(t *testing.T) {
	dir, key := trail(t, 10, audit.FileSinkOptions{})
	r := plugin(t, runOpts{}, "audit", "verify", "--help")
	r.wantCode(t, ExitOK)
	example := regexp.MustCompile(`kubectl get cm -n (\S+) (\S+) -o jsonpath='([^']+)' > (\S+)\n.*--trusted-checkpoint (\S+) `).FindStringSubmatch(r.stdout)
	if example == nil {
		t.Fatalf("no example reading the published checkpoint in\n%s", r.stdout)
	}
	namespace, name, template, saved, used := example[1], example[2], example[3], example[4], example[5]
	var opts operator.Options
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	opts.BindFlags(fs)
	if def := fs.Lookup("audit-checkpoint-configmap").DefValue; namespace+"/"+name != def || saved != used {
		t.Errorf("the example reads %s/%s into %s and verifies with %s; the operator publishes to %s", namespace, name, saved, used, def)
	}

	// The ConfigMap as the operator writes it, read back from the API server.
	files, _ := audit.ChainFiles(dir)
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	ns := env.Namespace(t)
	ctx := context.Background()
	published := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data: map[string]string{operator.CheckpointKey: string(lines[len(lines)-1]) + "\n"}}
	if err := env.Client.Create(ctx, published); err != nil {
		t.Fatal(err)
	}
	var got corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(published), &got); err != nil {
		t.Fatal(err)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&got)
	if err != nil {
		t.Fatal(err)
	}
	// As kubectl -o jsonpath does, with its default --allow-missing-template-keys: a wrong key
	// prints nothing rather than failing.
	jp := jsonpath.New("help").AllowMissingKeys(true)
	if err := jp.Parse(template); err != nil {
		t.Fatalf("the example's jsonpath %s: %v", template, err)
	}
	var out bytes.Buffer
	if err := jp.Execute(&out, obj); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out.String()) == "" {
		t.Fatalf("the example's jsonpath %s reads nothing from the ConfigMap the operator writes (key %q)", template, operator.CheckpointKey)
	}
	checkpoint := filepath.Join(t.TempDir(), saved)
	if err := os.WriteFile(checkpoint, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	plugin(t, runOpts{}, "audit", "verify", "--public-key", key, "--trusted-checkpoint", checkpoint, dir).wantCode(t, ExitOK)
}

// The help of --trusted-checkpoint, in the flag and in the long help, says what
// --allow-partial makes of a trail that starts after the checkpoint: a note, not truncated.
func TestAuditVerifyHelpOnATrustedCheckpointBeforeAPartialTrail(t *testing.T) {
	r := plugin(t, runOpts{}, "audit", "verify", "--help")
	r.wantCode(t, ExitOK)
	flagHelp := regexp.MustCompile(`(?m)^\s+--trusted-checkpoint string\s+(.*(?:\n\s{10,}\S.*)*)`).FindStringSubmatch(r.stdout)
	if flagHelp == nil || !strings.Contains(flagHelp[1], "--allow-partial") || !strings.Contains(flagHelp[1], "note") {
		t.Errorf("the flag's help does not say what --allow-partial makes of a trail that starts after the checkpoint:\n%s", r.stdout)
	}
	long := strings.Join(strings.Fields(r.stdout[:strings.Index(r.stdout, "Usage:")]), " ")
	if !strings.Contains(long, "With --allow-partial, a trail that starts after the trusted checkpoint") {
		t.Errorf("the long help does not say what --allow-partial makes of a trail that starts after the trusted checkpoint:\n%s", r.stdout)
	}
}
