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

func TestDistinctReadbacksAgreesWithFuseReadbacks(t *testing.T) {
	cases := []struct {
		name string
		reqs []ReadbackCopy
		ok   bool
	}{
		{"one per buffer, increasing", []ReadbackCopy{{Handle: 1, Src: 100, Len: 4}, {Handle: 2, Src: 50, Len: 8}}, true},
		{"same handle twice", []ReadbackCopy{{Handle: 1, Src: 100, Len: 4}, {Handle: 1, Src: 200, Len: 8}}, false},
		{"touching ranges of one handle", []ReadbackCopy{{Handle: 1, Src: 100, Len: 4}, {Handle: 1, Src: 104, Len: 4}}, false},
		{"decreasing handles", []ReadbackCopy{{Handle: 2, Src: 100, Len: 4}, {Handle: 1, Src: 200, Len: 8}}, false},
		{"an empty request", []ReadbackCopy{{Handle: 1, Src: 100}, {Handle: 2, Src: 200, Len: 8}}, false},
		{"a range past 2^64", []ReadbackCopy{{Handle: 1, Src: ^uint64(0) - 2, Len: 8}}, false},
		{"empty batch", nil, false},
	}
	for _, tc := range cases {
		bytes, ok := DistinctReadbacks(tc.reqs)
		if ok != tc.ok {
			t.Fatalf("%s: ok %v, want %v", tc.name, ok, tc.ok)
		}
		if !ok {
			continue
		}
		fused, err := FuseReadbacks(tc.reqs)
		if err != nil || bytes != fused.Bytes || !reflect.DeepEqual(fused.Copies, tc.reqs) {
			t.Fatalf("%s: DistinctReadbacks says %d bytes unchanged; FuseReadbacks gives %+v, %v", tc.name, bytes, fused, err)
		}
		for i, v := range fused.Views {
			if v != (ReadbackView{Slot: i, Len: tc.reqs[i].Len}) {
				t.Fatalf("%s: view %d is %+v, not the whole of copy %d", tc.name, i, v, i)
			}
		}
	}
}
