package text

import (
	"testing"
	"unicode/utf8"
)

func TestShortenCutsBetweenCharacters(t *testing.T) {
	for _, c := range []struct {
		text string
		n    int
		want string
	}{
		{"", 0, ""},
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijk", 10, "abcdefg..."},
		{"abcdefé☃xyz", 10, "abcdef..."},
		{"abcdeé☃xyz", 10, "abcdeé..."},
		{"abcde☃☃☃", 10, "abcde..."},
		{"☃☃☃☃", 5, "..."},
		{"☃☃☃☃", 3, "..."},
		{"ab☃", 2, "ab"}, // no room for the marker: cut only
		{"☃☃", 2, ""},
		{"abc", 0, ""},
		{"abc", -1, ""},
		{"a\xffb\xffcdefghij", 10, "a\xffb\xffcde..."},
	} {
		got := Shorten(c.text, c.n)
		if got != c.want || len(got) > max(c.n, 0) {
			t.Errorf("Shorten(%q, %d) = %q, want %q", c.text, c.n, got, c.want)
		}
		if utf8.ValidString(c.text) && !utf8.ValidString(got) {
			t.Errorf("Shorten(%q, %d) = %q: not valid UTF-8", c.text, c.n, got)
		}
	}
}
