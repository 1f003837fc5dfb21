package linstorsim

import (
	"net/http"
)

// LINSTOR's return codes (linstor-common's ApiConsts, as golinstor's apiconsts.go has them):
// a severity mask, an operation mask, an object mask and a code.
const (
	maskError int64 = -1 << 62 // 0xC000000000000000
	maskWarn  int64 = -1 << 63 // 0x8000000000000000

	maskCrt int64 = 0x1000000
	maskMod int64 = 0x2000000
	maskDel int64 = 0x3000000

	maskNode     int64 = 0x3C0000
	maskRscDfn   int64 = 0x380000
	maskRsc      int64 = 0x340000
	maskRscGrp   int64 = 0x440000
	maskStorPool int64 = 0x140000
	maskCtrlConf int64 = 0x100000

	codeCreated  int64 = 1
	codeDeleted  int64 = 2
	codeModified int64 = 3

	codeInvldNodeType   int64 = 201
	codeInvldVlmSize    int64 = 206
	codeInvldNetAddr    int64 = 210
	codeInvldProp       int64 = 213
	codeInvldPlaceCount int64 = 219
	codeNotFoundNode    int64 = 300
	codeNotFoundRscDfn  int64 = 301
	codeNotFoundStorPl  int64 = 310
	codeNotFoundRscGrp  int64 = 317
	codeExistsNode      int64 = 500
	codeExistsRsc       int64 = 502
	codeExistsStorPool  int64 = 510
	codeNotEnoughNodes  int64 = 996
	codeInUse           int64 = 997
	codeWarnNotConn     int64 = 1002
	codeWarnNotFound    int64 = 3000
	maskBitsCode        int64 = 0x7FFF
)

// apiCallRc is one entry of LINSTOR's answer (the document's ApiCallRc).
type apiCallRc struct {
	RetCode    int64             `json:"ret_code"`
	Message    string            `json:"message"`
	Cause      string            `json:"cause,omitempty"`
	Details    string            `json:"details,omitempty"`
	Correction string            `json:"correction,omitempty"`
	ObjRefs    map[string]string `json:"obj_refs,omitempty"`
}

// answer is a list of entries, as LINSTOR writes every answer to a change.
type answer []apiCallRc

func (a *answer) add(code int64, message string) *apiCallRc {
	*a = append(*a, apiCallRc{RetCode: code, Message: message})
	return &(*a)[len(*a)-1]
}

// status is the HTTP status LINSTOR gives an answer (ApiCallRcRestUtils.toResponse): the first
// error decides, 404 for a code in 300-399 (not found), 403 for 400-499 (access denied), 500
// for any other; without an error, the operation's success status.
func (a answer) status(success int) int {
	for _, rc := range a {
		if rc.RetCode&maskError != maskError {
			continue
		}
		switch code := rc.RetCode & maskBitsCode; {
		case code >= 300 && code <= 399:
			return http.StatusNotFound
		case code >= 400 && code <= 499:
			return http.StatusForbidden
		default:
			return http.StatusInternalServerError
		}
	}
	return success
}

// failed reports whether the answer holds an error.
func (a answer) failed() bool { return a.status(http.StatusOK) != http.StatusOK }
