package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	cortex "github.com/nsys-cortex/cortex/client"
)

// FuzzDecodeJSON feeds arbitrary bodies to the API's request decoding, as
// three routes' request types: it must never panic, must answer every
// refusal as BAD_REQUEST or TOO_LARGE, and what it accepts must re-encode
// to a body it accepts too, which means the same from then on (one round
// may drop what is empty: {"allow":[]} and no allow are one request).
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"id":"a","labels":{"team":"a"},"limits":{"pids":10}}`, `{"argv":["ls","-l"],"env":["A=1"],"timeoutMs":5}`,
		`{"shell":"echo hi","stdin":"x"}`, `{"id":"a","id":"b"}`, `{"ID":"a","id":"b"}`, `{"labels":{"a":"1","A":"2"}}`, `{"network":{"mode":"egress","allow":["x.com:443"]}}`,
		`[]`, `null`, `{"argv":"x"}`, `{} {}`, `{"a":`, "\xef\xbb\xbf{}", `{"limits":{"memoryBytes":1e400}}`} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(1))
		f.Add([]byte(s), uint8(2))
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		targets := []func() any{
			func() any { return &cortex.CreateRequest{} },
			func() any { return &cortex.ExecRequest{} },
			func() any { return &cortex.LabelsUpdate{} },
		}
		mk := targets[int(which)%len(targets)]
		v := mk()
		r := httptest.NewRequest(http.MethodPost, "/v1/neurons", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		err := decodeJSON(httptest.NewRecorder(), r, v)
		if err != nil {
			ae := apiError(err)
			var mbe *http.MaxBytesError
			if ae.Code != cortex.CodeBadRequest && ae.Code != cortex.CodeTooLarge && !errors.As(err, &mbe) {
				t.Fatalf("refused as %s, not BAD_REQUEST or TOO_LARGE: %v", ae.Code, err)
			}
			return
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("an accepted body does not re-encode: %v", err)
		}
		round := func(body []byte) []byte {
			w := mk()
			r2 := httptest.NewRequest(http.MethodPost, "/v1/neurons", bytes.NewReader(body))
			r2.Header.Set("Content-Type", "application/json")
			if err := decodeJSON(httptest.NewRecorder(), r2, w); err != nil {
				t.Fatalf("the re-encoding of an accepted body (%s) is refused: %v", body, err)
			}
			b, _ := json.Marshal(w)
			return b
		}
		second := round(again)
		if third := round(second); !bytes.Equal(second, third) {
			t.Fatalf("decoding is not stable: %s then %s", second, third)
		}
	})
}
