package restapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/throttle-rl/throttle/internal/testkit/npxtest"
)

// TestOpenAPIServed: GET /openapi.json serves the embedded document as
// JSON, without a key.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends()[0])
	r := e.call(t, "GET", "/openapi.json", "", "")
	want, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || r.body != string(want) {
		t.Fatalf("GET /openapi.json = %d %q, %d bytes; want 200 application/json, the embedded document (%d bytes)",
			r.status, r.header.Get("Content-Type"), len(r.body), len(want))
	}
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(r.body), &doc); err != nil || doc.OpenAPI != "3.1.0" || doc.Paths["/check"] == nil {
		t.Errorf("document: openapi %q, /check %v, err %v; want 3.1.0 and /check", doc.OpenAPI, doc.Paths["/check"] != nil, err)
	}
}

// TestOpenAPILint lints the document with Redocly CLI's recommended rules,
// all of them errors (redocly.yaml).
func TestOpenAPILint(t *testing.T) {
	t.Parallel()
	out := npxtest.Run(t, ".", []string{npxtest.RedoclyCLI}, "redocly", "lint", "openapi.yaml")
	if !strings.Contains(out, "Your API description is valid") {
		t.Errorf("redocly lint did not find the document valid:\n%s", out)
	}
}

// TestContractRefusesDrift: the validator the suite runs behind refuses
// replies and acceptances the document does not describe, so the suite's
// passing means something.
func TestContractRefusesDrift(t *testing.T) {
	v := contract(t)
	decision := `{"allowed":true,"exempted":false,"identifier":"u","limit":5,"remaining":4,"reset_at":1,"retry_after":0,"algorithm":"fixed_window","warning":false,"reason":"within_limit"}`
	body := `{"identifier":"u","limit":5,"window":60}`
	for _, tt := range []struct {
		name    string
		reqBody string
		status  int
		reply   string
		ok      bool
	}{
		{"as documented", body, 200, decision, true},
		{"a field the document lacks", body, 200, strings.Replace(decision, `"warning"`, `"extra":1,"warning"`, 1), false},
		{"no reason", body, 200, strings.Replace(decision, `,"reason":"within_limit"`, "", 1), false},
		{"an unknown reason", body, 200, strings.Replace(decision, `within_limit`, `lucky`, 1), false},
		{"a status the document lacks", body, http.StatusConflict, `{"error":"x","code":"CONFLICT"}`, false},
		{"an error code of another status", body, 400, `{"error":"x","code":"RULE_NOT_FOUND"}`, false},
		{"a bad request accepted", `{"identifier":"u","limit":0,"window":60}`, 200, decision, false},
		{"a bad request refused", `{"identifier":"u","limit":0,"window":60}`, 400, `{"error":"x","code":"INVALID_FIELD"}`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/check", bytes.NewReader([]byte(tt.reqBody)))
			req.Header.Set("Content-Type", "application/json")
			h := http.Header{"Content-Type": {"application/json"}}
			err := v.Check(req, []byte(tt.reqBody), tt.status, h, []byte(tt.reply))
			if (err == nil) != tt.ok {
				t.Errorf("Check = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
