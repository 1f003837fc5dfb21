package fleetsim

import (
	"strings"
	"testing"
)

func TestContinueTokensRoundTrip(t *testing.T) {
	t.Parallel()
	token, err := encodeContinue(42, "nodewright-system/nodewright-operator")
	if err != nil {
		t.Fatal(err)
	}
	rv, start, err := decodeContinue(token)
	if err != nil || rv != 42 || start != "nodewright-system/nodewright-operator\x00" {
		t.Fatalf("decodeContinue(%q) = %d, %q, %v; want 42, the key and a NUL", token, rv, start, err)
	}
	for _, bad := range []string{"", "!!", "e30", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MCwic3RhcnQiOiJ4In0"} {
		if _, _, err := decodeContinue(bad); err == nil || !strings.Contains(err.Error(), "continue key is not valid") {
			t.Errorf("decodeContinue(%q) = %v, want an error that says the key is not valid", bad, err)
		}
	}
}

func FuzzDecodeContinue(f *testing.F) {
	token, err := encodeContinue(7, "a/b")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{token, "", "e30", "%%%", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiYSJ9"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		rv, start, err := decodeContinue(token)
		if err != nil {
			return
		}
		// A token it accepts names a version and a start key, and encodes again to one that
		// reads the same.
		if rv == 0 || start == "" {
			t.Fatalf("decodeContinue(%q) accepted version %d and start %q", token, rv, start)
		}
		again, err := encodeContinue(rv, strings.TrimSuffix(start, "\x00"))
		if err != nil {
			t.Fatal(err)
		}
		if rv2, start2, err := decodeContinue(again); err != nil || rv2 != rv || (start2 != start && start2 != start+"\x00") {
			t.Fatalf("re-encoded token %q reads %d %q %v, want %d %q", again, rv2, start2, err, rv, start)
		}
	})
}
