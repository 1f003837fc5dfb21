package hostos

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// grubEditenv is the real grub-editenv (Debian's grub-common); the tests that need it skip,
// saying so, only when it is not installed.
func grubEditenv(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("grub-editenv")
	if err != nil {
		t.Skipf("grub-editenv (Debian package grub-common) is not installed, so the blocks it writes cannot be read: %v", err)
	}
	return path
}

// editenv runs grub-editenv on file with args.
func editenv(t testing.TB, tool, file string, args ...string) {
	t.Helper()
	out, err := exec.Command(tool, append([]string{file}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("grub-editenv %s %v: %v: %s", file, args, err, out)
	}
}

// TestParseGRUBEnvOfGrubEditenv reads blocks written by the real grub-editenv, each built by a
// series of its commands from a new block, and compares them with what it says they hold.
func TestParseGRUBEnvOfGrubEditenv(t *testing.T) {
	tool := grubEditenv(t)
	for _, tc := range []struct {
		name  string
		edits [][]string
		want  GRUBEnv
	}{
		{"new", nil, nil},
		{"an upgrade", [][]string{{"set", "enable_boot_assessment=yes"}},
			GRUBEnv{{"enable_boot_assessment", "yes"}}},
		{"an assessed boot under way", [][]string{{"set", "enable_boot_assessment=yes"}, {"set", "boot_assessment_tentative=yes"}},
			GRUBEnv{{"enable_boot_assessment", "yes"}, {"boot_assessment_tentative", "yes"}}},
		// Kairos's docs clear the flags by setting them empty: the variables stay, empty.
		{"cleared by hand", [][]string{{"set", "enable_boot_assessment=yes", "boot_assessment_tentative=yes"},
			{"set", "enable_boot_assessment="}, {"set", "boot_assessment_tentative="}},
			GRUBEnv{{"enable_boot_assessment", ""}, {"boot_assessment_tentative", ""}}},
		{"unset", [][]string{{"set", "enable_boot_assessment_always=yes", "boot_assessment_tentative=yes"}, {"unset", "enable_boot_assessment_always"}},
			GRUBEnv{{"boot_assessment_tentative", "yes"}}},
		{"set again, in place", [][]string{{"set", "a=1", "b=2"}, {"set", "a=longer value"}},
			GRUBEnv{{"a", "longer value"}, {"b", "2"}}},
		// grub_envblk_set escapes a backslash and a newline with a backslash.
		{"escapes", [][]string{{"set", "path=C:\\boot\\", "two=line one\nline two", "hash=#not padding", "eq=a=b"}},
			GRUBEnv{{"path", "C:\\boot\\"}, {"two", "line one\nline two"}, {"hash", "#not padding"}, {"eq", "a=b"}}},
		{"a value that fills the block", [][]string{{"set", "big=" + strings.Repeat("x", 1024-len(GRUBEnvSignature)-100)}},
			GRUBEnv{{"big", strings.Repeat("x", 1024-len(GRUBEnvSignature)-100)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "grubenv")
			editenv(t, tool, file, "create")
			for _, e := range tc.edits {
				editenv(t, tool, file, e...)
			}
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) != 1024 {
				t.Errorf("grub-editenv wrote %d bytes; GRUB's blocks are 1024", len(data))
			}
			got, err := ParseGRUBEnv(data)
			if err != nil {
				t.Fatalf("ParseGRUBEnv: %v\n%q", err, data)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseGRUBEnv = %q; want %q", got, tc.want)
			}
			// grub-editenv's own reading (list prints NAME=VALUE lines, a value's newline as it is).
			out, err := exec.Command(tool, file, "list").Output()
			if err != nil {
				t.Fatalf("grub-editenv list: %v", err)
			}
			var listed strings.Builder
			for _, v := range got {
				listed.WriteString(v.Name + "=" + v.Value + "\n")
			}
			if listed.String() != string(out) {
				t.Errorf("grub-editenv list says\n%q\nParseGRUBEnv read\n%q", out, listed.String())
			}
		})
	}
	// A name that does not fit: grub-editenv refuses ("environment block too small"), and
	// what it leaves is still read.
	file := filepath.Join(t.TempDir(), "grubenv")
	editenv(t, tool, file, "create")
	if out, err := exec.Command(tool, file, "set", "x="+strings.Repeat("y", 2000)).CombinedOutput(); err == nil {
		t.Errorf("grub-editenv set of 2000 bytes into a 1024-byte block succeeded: %s", out)
	}
	if data, _ := os.ReadFile(file); len(data) != 1024 {
		t.Errorf("the block is %d bytes after a refused set", len(data))
	} else if env, err := ParseGRUBEnv(data); err != nil || len(env) != 0 {
		t.Errorf("after a refused set: %q, %v", env, err)
	}
}

// Blocks written by hand, for the parser alone: what GRUB itself would not read to the end.
func TestParseGRUBEnvRefuses(t *testing.T) {
	pad := func(s string) []byte {
		b := []byte(GRUBEnvSignature + s)
		for len(b) < 1024 {
			b = append(b, '#')
		}
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
		err  string
	}{
		{"empty", nil, "at byte 0: it does not start with GRUB's signature"},
		{"another file", []byte("enable_boot_assessment=yes\n"), "does not start with GRUB's signature"},
		{"signature without its newline", []byte("# GRUB Environment Block"), "does not start with GRUB's signature"},
		{"no '=' on a line", pad("enable_boot_assessment\n"), `at byte 25: the line "enable_boot_assessment" is neither a NAME=VALUE variable nor padding`},
		{"an empty name", pad("=yes\n"), "at byte 25: a variable with an empty name"},
		{"no newline after the value", []byte(GRUBEnvSignature + "a=yes"), "at byte 25: the value of a runs to the block's end"},
		{"a name to the end", []byte(GRUBEnvSignature + "abc"), "a variable's line ends with the block"},
		{"a lone backslash at the end", []byte(GRUBEnvSignature + "a=yes\\"), "at byte 30: the value of a ends with a lone backslash"},
		{"too large", pad(strings.Repeat("#", MaxGRUBEnvBytes)), "more than the 65536 an environment block may have"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := ParseGRUBEnv(tc.data)
			var parseErr *GRUBEnvError
			if err == nil || !errors.As(err, &parseErr) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseGRUBEnv = %q, %v; want a *GRUBEnvError containing %q", env, err, tc.err)
			}
		})
	}
	// Read as GRUB reads them.
	for _, tc := range []struct {
		name string
		data []byte
		want GRUBEnv
	}{
		{"the signature alone", []byte(GRUBEnvSignature), nil},
		{"no padding", []byte(GRUBEnvSignature + "a=1\n"), GRUBEnv{{"a", "1"}}},
		{"a comment line, its escaped newline included", pad("# one \\\n still the comment\na=1\n"), GRUBEnv{{"a", "1"}}},
		{"a name given twice", pad("a=1\na=2\n"), GRUBEnv{{"a", "1"}, {"a", "2"}}},
		{"variables after the padding's newline", pad("a=1\n####\nb=2\n"), GRUBEnv{{"a", "1"}, {"b", "2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseGRUBEnv(tc.data)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseGRUBEnv = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if v, ok := (GRUBEnv{{"a", "1"}, {"a", "2"}}).Get("a"); v != "2" || !ok {
		t.Errorf("Get of a name given twice = %q, %v; want the last, as load_env leaves it", v, ok)
	}
	if _, ok := (GRUBEnv{{"a", "1"}}).Get("b"); ok {
		t.Error("Get found a variable the block does not have")
	}
}

// encodeGRUBEnv writes env as grub_envblk_set does, with no padding.
func encodeGRUBEnv(env GRUBEnv) []byte {
	var b bytes.Buffer
	b.WriteString(GRUBEnvSignature)
	for _, v := range env {
		b.WriteString(v.Name + "=")
		for i := 0; i < len(v.Value); i++ {
			if v.Value[i] == '\\' || v.Value[i] == '\n' {
				b.WriteByte('\\')
			}
			b.WriteByte(v.Value[i])
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// FuzzParseGRUBEnv: no block makes ParseGRUBEnv panic or hang; what it reads has names with
// no '=' or newline, and written again as GRUB writes it, it reads the same.
func FuzzParseGRUBEnv(f *testing.F) {
	f.Add([]byte(GRUBEnvSignature))
	f.Add([]byte(GRUBEnvSignature + "enable_boot_assessment=yes\nboot_assessment_tentative=yes\n####"))
	f.Add([]byte(GRUBEnvSignature + "# WARNING\na=x\\\\y\\\nz\nb=\n#"))
	f.Add([]byte(GRUBEnvSignature + "a=yes\\"))
	f.Add([]byte(GRUBEnvSignature + "=x\n"))
	f.Add([]byte(GRUBEnvSignature + "#\\"))
	if tool, err := exec.LookPath("grub-editenv"); err == nil {
		file := filepath.Join(f.TempDir(), "grubenv")
		editenv(f, tool, file, "create")
		editenv(f, tool, file, "set", "enable_boot_assessment=yes", "boot_assessment_tentative=yes", "e=\\\n")
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := ParseGRUBEnv(data)
		if err != nil {
			var parseErr *GRUBEnvError
			if !errors.As(err, &parseErr) || parseErr.Offset < 0 || parseErr.Offset > len(data) {
				t.Fatalf("ParseGRUBEnv error %v (%T)", err, err)
			}
			return
		}
		for _, v := range env {
			if v.Name == "" || strings.ContainsAny(v.Name, "=\n") {
				t.Fatalf("ParseGRUBEnv read the name %q", v.Name)
			}
		}
		again, err := ParseGRUBEnv(encodeGRUBEnv(env))
		if err != nil || !reflect.DeepEqual(again, env) {
			t.Fatalf("written again %q and read: %q, %v; want %q", encodeGRUBEnv(env), again, err, env)
		}
	})
}
