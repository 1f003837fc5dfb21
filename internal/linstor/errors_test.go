package linstor_test

import (
	"errors"
	"testing"

	"github.com/spectrocloud/nodewright/internal/linstor"
)

// LINSTOR's return codes: the error mask and a number (golinstor's apiconsts.go).
const maskError = -1 << 62

func TestErrorKindsFromLINSTORsCodes(t *testing.T) {
	cases := []struct {
		code   int64
		status int
		is     error
	}{
		{maskError | 300, 404, linstor.ErrNotFound}, // FAIL_NOT_FOUND_NODE
		{maskError | 317, 404, linstor.ErrNotFound}, // FAIL_NOT_FOUND_RSC_GRP
		{maskError | 502, 500, linstor.ErrExists},   // FAIL_EXISTS_RSC
		{maskError | 522, 500, linstor.ErrExists},   // FAIL_EXISTS_RSC_GRP
		{maskError | 997, 500, linstor.ErrInUse},    // FAIL_IN_USE
		{maskError | 521, 500, nil},                 // FAIL_LOST_STOR_POOL: not "exists"
		{maskError | 206, 500, nil},                 // FAIL_INVLD_VLM_SIZE
		{-1<<63 | 3000, 404, linstor.ErrNotFound},   // a warning, but a 404
	}
	for _, c := range cases {
		err := error(&linstor.Error{Op: "x", Status: c.status, Messages: []linstor.Message{{Code: c.code, Text: "t"}}})
		for _, kind := range []error{linstor.ErrNotFound, linstor.ErrExists, linstor.ErrInUse} {
			if got := errors.Is(err, kind); got != (c.is != nil && errors.Is(c.is, kind)) {
				t.Errorf("code %#x status %d: errors.Is(%v) = %v", uint64(c.code), c.status, kind, got)
			}
		}
	}
}
