package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
	"github.com/spectrocloud/nodewright/internal/profile"
)

func TestProfileSignVerifyRoundTrip(t *testing.T) {
	t.Setenv("NODEWRIGHT_PROFILE_PASSWORD", "correct horse")
	dir := t.TempDir()
	sample, err := os.ReadFile(filepath.Join(env.RepoRoot, "config", "samples", "nodewright_v1alpha1_edgeprofile.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(file, sample, 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(dir, "signing")

	r := plugin(t, runOpts{}, "profile", "keygen", "--output-key-prefix", prefix)
	r.wantCode(t, ExitOK)
	if !strings.Contains(r.stderr, "Private key written to "+prefix+".key") {
		t.Errorf("keygen: %q", r.stderr)
	}
	// Never over an existing key: a usage error.
	plugin(t, runOpts{}, "profile", "keygen", "--output-key-prefix", prefix).wantCode(t, ExitUsage)

	// Unsigned: verify fails with 1.
	r = plugin(t, runOpts{}, "profile", "verify", "--key", prefix+".pub", file)
	r.wantCode(t, ExitFailed)

	plugin(t, runOpts{}, "profile", "sign", "--key", prefix+".key", "-w", file).wantCode(t, ExitOK)
	r = plugin(t, runOpts{}, "profile", "verify", "--key", prefix+".pub", file)
	r.wantCode(t, ExitOK)
	if !strings.HasPrefix(r.stdout, "Verified OK: "+file+" (spec.version 1.0.0, sha256:") {
		t.Errorf("verify: %q", r.stdout)
	}

	// digest and canonical agree with the library; standard input works as "-".
	decoded, err := profile.Decode(sample)
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := profile.Digest(decoded.Spec)
	canonical, _ := profile.Canonical(decoded.Spec)
	if r := plugin(t, runOpts{stdin: string(sample)}, "profile", "digest", "-"); r.stdout != digest+"\n" {
		t.Errorf("digest %q, want %q", r.stdout, digest)
	}
	if r := plugin(t, runOpts{}, "profile", "canonical", file); r.stdout != string(canonical) {
		t.Errorf("canonical %q, want %q", r.stdout, canonical)
	}

	// A changed spec no longer verifies.
	signed, _ := os.ReadFile(file)
	if err := os.WriteFile(file, bytes.Replace(signed, []byte("storageVLAN: 100"), []byte("storageVLAN: 200"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	r = plugin(t, runOpts{}, "profile", "verify", "--key", prefix+".pub", file)
	r.wantCode(t, ExitFailed)
	if !strings.HasPrefix(r.stderr, "Error: "+file+": signature: ") {
		t.Errorf("a changed spec: %q", r.stderr)
	}

	// Usage errors: 2.
	plugin(t, runOpts{}, "profile", "verify", file).wantCode(t, ExitUsage)                                             // no key
	plugin(t, runOpts{}, "profile", "verify", "--key", filepath.Join(dir, "missing.pub"), file).wantCode(t, ExitUsage) // unreadable
	plugin(t, runOpts{}, "profile", "digest").wantCode(t, ExitUsage)                                                   // no file
}

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		r := plugin(t, runOpts{}, "completion", shell)
		r.wantCode(t, ExitOK)
		if len(r.stdout) < 1000 || !strings.Contains(r.stdout, "kubectl-nodewright") {
			t.Errorf("completion %s: %d bytes", shell, len(r.stdout))
		}
	}
	plugin(t, runOpts{}, "completion", "tcsh").wantCode(t, ExitUsage)
	plugin(t, runOpts{}, "completion").wantCode(t, ExitUsage)

	// Names come from the API server.
	ns := env.Namespace(t)
	createMigration(t, ns, "move-web", "web", "", nwv1.VMVolumeMigrationStatus{})
	createMigration(t, ns, "move-db", "db", "", nwv1.VMVolumeMigrationStatus{})
	r := plugin(t, runOpts{}, "__complete", "migrate", "watch", "-n", ns, "move-w")
	r.wantCode(t, ExitOK)
	if !strings.HasPrefix(r.stdout, "move-web\n:4\n") {
		t.Errorf("completing a migration's name: %q", r.stdout)
	}
	r = plugin(t, runOpts{}, "__complete", "migrate", "list", "-o", "")
	if !strings.HasPrefix(r.stdout, "table\njson\nyaml\n:4\n") {
		t.Errorf("completing -o: %q", r.stdout)
	}
}

// Every command has help with examples and says its exit codes; --help exits 0.
func TestEveryCommandIsDocumented(t *testing.T) {
	root := NewRootCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}})
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Name() == "help" || cmd.Hidden {
			return
		}
		if cmd.Example == "" {
			t.Errorf("%s has no examples", cmd.CommandPath())
		}
		if !strings.Contains(cmd.Long, "Exit codes") && cmd.HasParent() && cmd.Runnable() && !cmd.HasSubCommands() {
			t.Errorf("%s does not document its exit codes", cmd.CommandPath())
		}
		args := strings.Fields(strings.TrimPrefix(cmd.CommandPath(), "kubectl nodewright"))
		r := plugin(t, runOpts{}, append(args, "--help")...)
		r.wantCode(t, ExitOK)
		if !strings.Contains(r.stdout, "Examples:") {
			t.Errorf("%s --help shows no examples", cmd.CommandPath())
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// Every command that lists or shows something takes -o table, json and yaml, offered first and
// in that order by completion (a command may offer more after them: fleet's name); text is
// another name for table.
func TestEveryOutputFlagTakesTableJSONYAML(t *testing.T) {
	root := NewRootCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}})
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		if fl := cmd.Flags().Lookup("output"); fl != nil && fl.Shorthand == "o" {
			args := strings.Fields(strings.TrimPrefix(cmd.CommandPath(), "kubectl nodewright"))
			r := plugin(t, runOpts{}, append(append([]string{"__complete"}, args...), "-o", "")...)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if len(lines) < 4 || strings.Join(lines[:3], ",") != "table,json,yaml" || lines[len(lines)-1] != ":4" {
				t.Errorf("%s -o completes %q, want table, json, yaml first", cmd.CommandPath(), r.stdout)
			}
			if fl.DefValue != outputTable {
				t.Errorf("%s -o defaults to %q, want table", cmd.CommandPath(), fl.DefValue)
			}
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{nil, ExitOK}, // the help
		{[]string{"no-such-command"}, ExitUsage},
		{[]string{"status", "--no-such-flag"}, ExitUsage},
		{[]string{"status", "extra"}, ExitUsage},
		{[]string{"events", "-o", "wide"}, ExitUsage},
		{[]string{"audit", "tail", "--tail", "many"}, ExitUsage},
	} {
		if r := plugin(t, runOpts{}, c.args...); r.code != c.code {
			t.Errorf("%v: exit code %d, want %d (stderr %q)", c.args, r.code, c.code, r.stderr)
		}
	}
	// An API server that cannot be reached is the operation failing.
	var out, errOut bytes.Buffer
	code := Run(context.Background(), NewRootCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}),
		[]string{"--server", "https://127.0.0.1:1", "--insecure-skip-tls-verify", "--request-timeout", "2s", "status"})
	if code != ExitFailed || !strings.HasPrefix(errOut.String(), "Error: ") {
		t.Errorf("unreachable API server: exit code %d, stderr %q", code, errOut.String())
	}
}

// A command added from outside (the web UI) gets the root's connection, and its errors the
// plugin's exit codes.
func TestAddCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	root := NewRootCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	var gotNamespace, gotHost string
	AddCommand(root, func(f *Factory) *cobra.Command {
		return &cobra.Command{Use: "extra", Short: "x", RunE: func(*cobra.Command, []string) error {
			cfg, err := f.RESTConfig()
			if err != nil {
				return err
			}
			gotHost = cfg.Host
			gotNamespace, _, err = f.Namespace()
			if err != nil {
				return err
			}
			return os.ErrNotExist
		}}
	})
	code := Run(context.Background(), root, []string{"--kubeconfig", kubeconfigPath(t), "-n", "apps", "extra"})
	if code != ExitFailed || gotNamespace != "apps" || strings.TrimSuffix(gotHost, "/") != strings.TrimSuffix(env.Config.Host, "/") || errOut.String() != "Error: file does not exist\n" {
		t.Errorf("exit code %d, namespace %q, host %q (want %q), stderr %q", code, gotNamespace, gotHost, env.Config.Host, errOut.String())
	}
}
