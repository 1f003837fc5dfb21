package profile

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// docs/profile.md defines the encoding; its example must be the pinned bytes.
func TestDocsExampleIsTheGoldenEncoding(t *testing.T) {
	docs, err := os.ReadFile("../../docs/profile.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Canonical encoding v1",
		"\n" + goldenMinimal + "\n",
		goldenMinimalDigest,
		fmt.Sprintf("(one line, %d bytes, no newline)", len(goldenMinimal)),
	} {
		if !strings.Contains(string(docs), want) {
			t.Errorf("docs/profile.md does not have %s", want)
		}
	}
}
