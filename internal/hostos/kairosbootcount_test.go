package hostos

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf16"

	nwv1 "github.com/spectrocloud/nodewright/api/v1alpha1"
)

// efiString is s as efivarfs shows a string variable systemd set: the attributes systemd-boot's
// efivar_set gives a volatile variable (BOOTSERVICE_ACCESS|RUNTIME_ACCESS, 0x6), then UTF-16LE
// with its NUL.
func efiString(s string) []byte {
	b := []byte{0x06, 0, 0, 0}
	for _, u := range utf16.Encode([]rune(s + "\x00")) {
		b = append(b, byte(u), byte(u>>8))
	}
	return b
}

// TestParseBootCounter: the names systemd-boot's boot_entry_parse_tries counts, and those it
// does not (no counter).
func TestParseBootCounter(t *testing.T) {
	for _, c := range []struct {
		path       string
		left, done int32
		ok         bool
	}{
		{`\loader\entries\active+2-1.conf`, 2, 1, true},
		{`\loader\entries\active+3.conf`, 3, 0, true},
		{`\loader\entries\active+0-3.conf`, 0, 3, true},
		{`\loader\entries\passive+1-2.conf`, 1, 2, true},
		{`\EFI\Linux\kairos_v3.5.0+2-1.efi`, 2, 1, true},
		{`\loader\entries\a+b+1-0.conf`, 1, 0, true}, // the last '+'
		{`\loader\entries\active+2147483647-0.conf`, 2147483647, 0, true},
		{`\loader\entries\active.conf`, 0, 0, false},            // counted as good: renamed
		{`\loader\entries\active+2147483648.conf`, 0, 0, false}, // more than INT_MAX
		{`\loader\entries\active+2-1.conf.bak`, 0, 0, false},    // the counter in the middle
		{`\loader\entries\active+-1.conf`, 0, 0, false},         // no LEFT
		{`\loader\entries\active+2-.conf`, 0, 0, false},         // no DONE after '-'
		{`\loader\entries\active+2-1.txt`, 0, 0, false},         // not an entry's suffix
		{`\loader\entries+1\active.conf`, 0, 0, false},          // a '+' of the folder's
		{`\loader\entries\active+ 2.conf`, 0, 0, false},
		{``, 0, 0, false},
	} {
		left, done, ok := ParseBootCounter(c.path)
		if left != c.left || done != c.done || ok != c.ok {
			t.Errorf("ParseBootCounter(%q) = %d, %d, %v; want %d, %d, %v", c.path, left, done, ok, c.left, c.done, c.ok)
		}
	}
}

// TestParseEFIVarString: systemd's strings read back; what efivarfs would not hold from it is
// refused, saying why.
func TestParseEFIVarString(t *testing.T) {
	if got, err := ParseEFIVarString(efiString(`\loader\entries\active+2-1.conf`)); err != nil || got != `\loader\entries\active+2-1.conf` {
		t.Errorf("a path systemd-boot set: %q, %v", got, err)
	}
	for name, c := range map[string]struct {
		data []byte
		why  string
	}{
		"empty":            {nil, "fewer than the variable's 4 bytes"},
		"attributes alone": {[]byte{6, 0, 0, 0}, "does not end with a UTF-16 NUL"},
		"odd":              {append(efiString("a"), 0), "odd length"},
		"no NUL":           {efiString("abc")[:10], "does not end with a UTF-16 NUL"},
		"NUL inside":       {append([]byte{6, 0, 0, 0, 'a', 0, 0, 0}, efiString("b")[4:]...), "a NUL at UTF-16 unit 1"},
		"lone surrogate":   {[]byte{6, 0, 0, 0, 0x00, 0xd8, 0, 0}, "lone surrogate"},
		"too long":         {efiString(strings.Repeat("a", 2000)), "more than"},
	} {
		if _, err := ParseEFIVarString(c.data); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v; want an error saying %q", name, err, c.why)
		}
	}
}

// TestKairosBootCountingInFacts: the variable under the host's root is read into the Kairos
// facts; without it, or with a name without a counter, there is no bootCounting; a broken
// variable is an error, the other facts still read.
func TestKairosBootCountingInFacts(t *testing.T) {
	root := t.TempDir()
	h := Host{Root: root, Proc: t.TempDir()}
	if err := os.WriteFile(filepath.Join(h.Proc, "cmdline"), []byte("BOOT_IMAGE=/vmlinuz rd.immucore.uki\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(rel string, data []byte) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("etc/kairos-release", []byte("KAIROS_VERSION=\"v3.5.0\"\nKAIROS_IMAGE_REPO=\"quay.io/kairos/ubuntu:24.04\"\n"))
	write("etc/os-release", []byte("NAME=\"Ubuntu\"\nID=ubuntu\n"))
	facts, _ := Kairos{}.Facts(h)
	if facts.Kairos == nil || facts.Kairos.BootCounting != nil {
		t.Fatalf("no variable: %+v", facts.Kairos)
	}
	write(LoaderBootCountPathFile, efiString(`\loader\entries\active+2-1.conf`))
	facts, err := Kairos{}.Facts(h)
	if err != nil || !reflect.DeepEqual(facts.Kairos.BootCounting, &nwv1.KairosBootCounting{TriesLeft: 2, TriesDone: 1}) {
		t.Errorf("active+2-1: %+v, %v", facts.Kairos.BootCounting, err)
	}
	write(LoaderBootCountPathFile, efiString(`\loader\entries\active.conf`))
	if facts, err := (Kairos{}).Facts(h); err != nil || facts.Kairos.BootCounting != nil {
		t.Errorf("a name without a counter: %+v, %v", facts.Kairos.BootCounting, err)
	}
	write(LoaderBootCountPathFile, []byte{6, 0, 0})
	facts, err = Kairos{}.Facts(h)
	if err == nil || !strings.Contains(err.Error(), "the boot counter") || facts.Kairos.Version != "v3.5.0" {
		t.Errorf("a broken variable: %v, version %q; want an error and the rest read", err, facts.Kairos.Version)
	}
}

// FuzzBootCounter: any variable's bytes are read without a panic; what reads as a counter is
// within the API's bounds and prints back as the name's counter.
func FuzzBootCounter(f *testing.F) {
	for _, s := range []string{`\loader\entries\active+2-1.conf`, `\loader\entries\active+3.conf`, `\loader\entries\active.conf`,
		`\EFI\Linux\k+1-2.efi`, `\loader\entries\a+99999999999.conf`, ""} {
		f.Add(efiString(s))
	}
	f.Add([]byte{6, 0, 0, 0, 0x00, 0xd8, 0, 0})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		path, err := ParseEFIVarString(data)
		if err != nil {
			return
		}
		left, done, ok := ParseBootCounter(path)
		if !ok {
			return
		}
		if left < 0 || done < 0 {
			t.Fatalf("%q: negative counter %d, %d", path, left, done)
		}
		if !strings.Contains(path, "+") {
			t.Fatalf("%q: a counter read from a name without '+'", path)
		}
	})
}
