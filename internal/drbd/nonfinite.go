package drbd

import "bytes"

// nonFiniteWords are what C's printf("%f") writes for a value that is not a finite number.
// drbdsetup prints its statistics so, and some versions print estimated-seconds-to-finish as
// nan while a resynchronisation has not moved yet (drbd-utils 9.6; later versions print
// 987654321 instead). They are not JSON, so ParseStatus reads them as null.
var nonFiniteWords = [][]byte{[]byte("-nan"), []byte("nan"), []byte("-inf"), []byte("inf")}

// nullNonFiniteNumbers returns data with every bare nan, -nan, inf and -inf outside a string
// replaced by null. Data without one is returned as it is.
func nullNonFiniteNumbers(data []byte) []byte {
	if !bytes.Contains(data, []byte("nan")) && !bytes.Contains(data, []byte("inf")) {
		return data
	}
	var out []byte
	copied := 0
	inString, escaped := false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
			continue
		}
		word := nonFiniteWordAt(data, i)
		if word == 0 {
			continue
		}
		out = append(out, data[copied:i]...)
		out = append(out, "null"...)
		i += word - 1
		copied = i + 1
	}
	if out == nil {
		return data
	}
	return append(out, data[copied:]...)
}

// nonFiniteWordAt returns the length of the non-finite word that starts at data[i] and stands
// alone (not part of a longer word), or 0.
func nonFiniteWordAt(data []byte, i int) int {
	if i > 0 && isWordByte(data[i-1]) {
		return 0
	}
	for _, word := range nonFiniteWords {
		end := i + len(word)
		if bytes.HasPrefix(data[i:], word) && (end == len(data) || !isWordByte(data[end])) {
			return len(word)
		}
	}
	return 0
}

func isWordByte(c byte) bool {
	return c == '-' || c == '_' || c == '.' || c == '+' ||
		('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}
