// Package text bounds free texts (messages, reasons) for the API objects and records they go
// into. It depends on nothing but the standard library, so that the node agent links it
// without the audit trail's dependencies.
package text

// cutMarker ends a text that Shorten cut.
const cutMarker = "..."

// Shorten bounds a free text to maxBytes bytes, "..." included when it is cut. It cuts between
// two characters, never inside one, so a valid UTF-8 text stays valid: a byte cut would be
// written to the trail (and shown by kubectl) as a replacement character. Bytes that are not
// UTF-8 count as one character each.
func Shorten(s string, maxBytes int) string {
	if len(s) <= maxBytes {
		return s
	}
	if maxBytes < len(cutMarker) {
		return s[:boundaryBefore(s, max(maxBytes, 0))]
	}
	return s[:boundaryBefore(s, maxBytes-len(cutMarker))] + cutMarker
}

// boundaryBefore is the length of the longest prefix of s, at most end bytes (end < len(s)),
// that holds whole characters: the start of the last character beginning at or before end.
func boundaryBefore(s string, end int) int {
	cut := 0
	for i := range s { // i steps from character to character
		if i > end {
			break
		}
		cut = i
	}
	return cut
}
