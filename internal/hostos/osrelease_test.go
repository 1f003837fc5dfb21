package hostos

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestParseOSReleaseSamples(t *testing.T) {
	for _, tc := range []struct {
		file string
		want map[string]string // a few of the keys
	}{
		{"debian-12", map[string]string{"NAME": "Debian GNU/Linux", "VERSION_ID": "12", "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)", "ID": "debian", "VERSION_CODENAME": "bookworm"}},
		{"ubuntu-24.04", map[string]string{"NAME": "Ubuntu", "VERSION_ID": "24.04", "PRETTY_NAME": "Ubuntu 24.04.1 LTS", "ID_LIKE": "debian", "LOGO": "ubuntu-logo"}},
		{"talos-1.9", map[string]string{"NAME": "Talos", "ID": "talos", "VERSION_ID": "v1.9.0", "VENDOR_NAME": "Sidero Labs"}},
		{"kairos-release-ubuntu-24.04-standard", map[string]string{"KAIROS_VERSION": "v3.4.2", "KAIROS_FLAVOR": "ubuntu", "KAIROS_FLAVOR_RELEASE": "24.04",
			"KAIROS_VARIANT": "standard", "KAIROS_MODEL": "generic", "KAIROS_SOFTWARE_VERSION": "v1.32.4+k3s1"}},
		{"kairos-release-hadron-core", map[string]string{"KAIROS_VERSION": "v4.0.3", "KAIROS_FLAVOR": "hadron", "KAIROS_VARIANT": "core"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "os-release", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			vars, err := ParseOSRelease(data)
			if err != nil {
				t.Fatalf("ParseOSRelease: %v", err)
			}
			for k, v := range tc.want {
				if vars[k] != v {
					t.Errorf("%s = %q; want %q", k, vars[k], v)
				}
			}
			// Every line is an assignment: nothing was dropped.
			lines := 0
			for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				if l != "" && !strings.HasPrefix(l, "#") {
					lines++
				}
			}
			if len(vars) != lines {
				t.Errorf("%d variables from %d assignments", len(vars), lines)
			}
		})
	}
}

func TestParseOSReleaseQuoting(t *testing.T) {
	data := "# a comment\n" +
		"\n" +
		"PLAIN=word\n" +
		`DOUBLE="two words"` + "\n" +
		`ESCAPED="a \"quoted\" \$HOME \\ and \` + "`" + `tick\` + "`" + `"` + "\n" +
		`KEPT="a \n stays"` + "\n" +
		`SINGLE='it is $literal \n'` + "\n" +
		`BARE=back\ slash` + "\n" +
		"EMPTY=\n" +
		`EMPTYQ=""` + "\n" +
		"  INDENTED=yes  \r\n" +
		`COMMENTED="value" # a shell comment` + "\n" +
		"TWICE=first\nTWICE=last\n"
	vars, err := ParseOSRelease([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"PLAIN":     "word",
		"DOUBLE":    "two words",
		"ESCAPED":   "a \"quoted\" $HOME \\ and `tick`",
		"KEPT":      `a \n stays`,
		"SINGLE":    `it is $literal \n`,
		"BARE":      "back slash",
		"EMPTY":     "",
		"EMPTYQ":    "",
		"INDENTED":  "yes",
		"COMMENTED": "value",
		"TWICE":     "last",
	}
	if !reflect.DeepEqual(vars, want) {
		t.Errorf("got  %v\nwant %v", vars, want)
	}
}

func TestParseOSReleaseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		line       int
		reason     string
	}{
		{"no assignment", "NAME=ok\njust words\n", 2, `"just words" is not a KEY=value assignment`},
		{"a bad key", "1ST=x\n", 1, `"1ST" is not a variable name`},
		{"a key with a dash", "MY-KEY=x\n", 1, `"MY-KEY" is not a variable name`},
		{"an empty key", "=x\n", 1, `"" is not a variable name`},
		{"an open double quote", "A=1\nNAME=\"Debian\n", 2, "the value of NAME: the double quote is not closed"},
		{"an open single quote", "NAME='Debian\n", 1, "the value of NAME: the single quote is not closed"},
		{"concatenated quotes", `NAME="a""b"` + "\n", 1, `the value of NAME: "\"b\"" after the closing quote`},
		{"a quote in a bare value", `NAME=a"b"` + "\n", 1, "the value of NAME: a quote inside a bare value"},
		{"invalid UTF-8", "A=1\nB=2\nNAME=\xff\n", 3, "not valid UTF-8"},
		{"too big", "A=" + strings.Repeat("x", MaxReleaseFileBytes), 0, "more than the 65536 an os-release file may have"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars, err := ParseOSRelease([]byte(tc.data))
			var re *ReleaseError
			if !errors.As(err, &re) {
				t.Fatalf("ParseOSRelease = %v, %v; want a *ReleaseError", vars, err)
			}
			if re.Line != tc.line || !strings.Contains(re.Reason, tc.reason) {
				t.Errorf("line %d %q; want line %d containing %q", re.Line, re.Reason, tc.line, tc.reason)
			}
			if tc.line > 0 && !strings.HasPrefix(err.Error(), "line ") {
				t.Errorf("%q does not name the line", err)
			}
		})
	}
}

// FuzzParseOSRelease: no input makes ParseOSRelease panic; a refusal is a *ReleaseError with a
// reason; and what it accepts, written back with every value double-quoted, reads the same.
func FuzzParseOSRelease(f *testing.F) {
	samples, err := filepath.Glob(filepath.Join("testdata", "os-release", "*"))
	if err != nil || len(samples) == 0 {
		f.Fatalf("no samples in testdata/os-release (%v)", err)
	}
	for _, sample := range samples {
		data, err := os.ReadFile(sample)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, seed := range []string{"", "=", "A=\"", "A='", `A="\`, "A=\\", "A=\"x\" #c", "# only\n\n", "A=\xc3"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		vars, err := ParseOSRelease(data)
		if err != nil {
			var re *ReleaseError
			if !errors.As(err, &re) || re.Reason == "" {
				t.Fatalf("refusal %v is not a *ReleaseError with a reason", err)
			}
			return
		}
		var keys []string
		for k := range vars {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys {
			v := vars[k]
			if strings.ContainsAny(v, "\n") {
				// A line break cannot be written back in this format; the parser never
				// produces one, as it reads line by line.
				t.Fatalf("%s has a line break: %q", k, v)
			}
			v = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`").Replace(v)
			b.WriteString(k + `="` + v + "\"\n")
		}
		again, err := ParseOSRelease([]byte(b.String()))
		if err != nil {
			// Quoting may make a file just under the size bound go over it.
			if b.Len() > MaxReleaseFileBytes {
				return
			}
			t.Fatalf("written back, refused: %v\n%s", err, b.String())
		}
		if !reflect.DeepEqual(again, vars) {
			t.Fatalf("written back, read differently:\n first %v\nsecond %v", vars, again)
		}
	})
}
