package fusion

import (
	"reflect"
	"testing"
)

func TestDistinctUploadsAgreesWithFuseUploads(t *testing.T) {
	a, b := make([]byte, 4), make([]byte, 8)
	cases := []struct {
		name   string
		copies []UploadCopy
		ok     bool
	}{
		{"one per buffer, increasing", []UploadCopy{{Handle: 1, Dst: 100, Data: a}, {Handle: 2, Dst: 50, Data: b}}, true},
		{"same handle twice", []UploadCopy{{Handle: 1, Dst: 100, Data: a}, {Handle: 1, Dst: 200, Data: b}}, false},
		{"decreasing handles", []UploadCopy{{Handle: 2, Dst: 100, Data: a}, {Handle: 1, Dst: 200, Data: b}}, false},
		{"an empty copy", []UploadCopy{{Handle: 1, Dst: 100}, {Handle: 2, Dst: 200, Data: b}}, false},
		{"empty batch", nil, false},
	}
	for _, tc := range cases {
		bytes, ok := DistinctUploads(tc.copies)
		if ok != tc.ok {
			t.Fatalf("%s: ok %v, want %v", tc.name, ok, tc.ok)
		}
		if !ok {
			continue
		}
		fused, want, err := FuseUploads(tc.copies)
		if err != nil || bytes != want || !reflect.DeepEqual(fused, tc.copies) {
			t.Fatalf("%s: DistinctUploads says %d bytes unchanged; FuseUploads gives %v, %d, %v", tc.name, bytes, fused, want, err)
		}
	}
}
