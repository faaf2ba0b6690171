// Package openapitest checks HTTP exchanges against an OpenAPI 3.1 document
// with kin-openapi's openapi3filter, so tests catch a reply (or a request
// the server accepts) that the document does not describe.
//
// An exchange passes when its reply is one the document gives the operation
// (status, headers, body), and when a request the document calls invalid
// got a 4xx. A request to a path and method the document does not have must
// get the API's 404 or 405. The dashboard's files (/ui/) and CORS preflights
// are not operations of the API and are not checked.
package openapitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// Validator checks exchanges against one document. It is safe for
// concurrent use.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
}

// New loads doc (YAML or JSON), checks that it is a valid OpenAPI
// document, and fails t when it is not.
func New(t testing.TB, doc []byte) *Validator {
	t.Helper()
	v, err := Load(doc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Load is New without a test.
func Load(doc []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	d, err := loader.LoadFromData(doc)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	if err := d.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is not valid: %w", err)
	}
	// The servers' URLs do not matter: requests go to test servers.
	d.Servers = nil
	r, err := legacy.NewRouter(d)
	if err != nil {
		return nil, fmt.Errorf("route the OpenAPI document: %w", err)
	}
	return &Validator{doc: d, router: r}, nil
}

// Check validates one exchange: the request (whose body is reqBody) and the
// reply's status, header and body.
func (v *Validator) Check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	if strings.HasPrefix(req.URL.Path, "/ui/") || isPreflight(req) {
		return nil
	}
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	r.ContentLength = int64(len(reqBody))
	normalizeContentType(r, reqBody)
	route, params, err := v.findRoute(r)
	if err != nil {
		if status == http.StatusNotFound || status == http.StatusMethodNotAllowed {
			return nil
		}
		return fmt.Errorf("%s %s is not in the document (%v), yet it got %d", req.Method, req.URL.Path, err, status)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if reqErr != nil && (status < 400 || status > 499) {
		return fmt.Errorf("%s %s: the document refuses the request (%v), yet it got %d, not a 4xx", req.Method, req.URL.Path, reqErr, status)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header, Options: opts}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("%s %s: reply %d %s does not match the document: %w", req.Method, req.URL.Path, status, clip(body), err)
	}
	return nil
}

// findRoute finds r's operation. A path the document has no template for
// may still be one whose last parameter takes the rest of the path, '/'
// included (DELETE /exemptions/{identifier}): it is tried as that, with the
// rest escaped into one segment.
func (v *Validator) findRoute(r *http.Request) (*routers.Route, map[string]string, error) {
	route, params, err := v.router.FindRoute(r)
	if err == nil {
		return route, params, nil
	}
	for _, tmpl := range v.doc.Paths.InMatchingOrder() {
		i := strings.LastIndex(tmpl, "/{")
		if i < 0 || !strings.HasSuffix(tmpl, "}") || strings.Contains(tmpl[:i], "{") {
			continue
		}
		prefix := tmpl[:i+1]
		rest, ok := strings.CutPrefix(r.URL.Path, prefix)
		if !ok || !strings.Contains(rest, "/") {
			continue
		}
		rr := r.Clone(r.Context())
		rr.URL.Path = prefix + "x"
		rr.URL.RawPath = ""
		if route, params, err2 := v.router.FindRoute(rr); err2 == nil && route.Path == tmpl {
			params[tmpl[i+2:len(tmpl)-1]] = rest
			return route, params, nil
		}
	}
	return nil, nil, err
}

// isPreflight reports whether r is a CORS preflight: HTTP plumbing the
// document describes in words, not as operations.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
}

// normalizeContentType reads a body sent without a Content-Type, or as
// curl's default form type, as JSON: the API does (docs/api.md).
func normalizeContentType(r *http.Request, body []byte) {
	if len(body) == 0 {
		return
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, _ := mime.ParseMediaType(ct); ct == "" || mt == "application/x-www-form-urlencoded" {
		r.Header.Set("Content-Type", "application/json")
	}
}

// Handler wraps h so that every exchange it serves is checked; a failure is
// reported on t (t.Errorf), and the reply goes out unchanged.
func (v *Validator) Handler(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("openapitest: read the request body: %v", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if err := v.Check(r, body, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			t.Errorf("openapitest: %v", err)
		}
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// Transport returns a RoundTripper over base (nil: http.DefaultTransport)
// that checks every exchange, reporting a failure on t.
func (v *Validator) Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		var reqBody []byte
		if req.Body != nil {
			b, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			reqBody = b
			req.Body = io.NopCloser(bytes.NewReader(b))
		}
		res, err := base.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return nil, errors.Join(errors.New("openapitest: read the reply"), err)
		}
		res.Body = io.NopCloser(bytes.NewReader(body))
		if err := v.Check(req, reqBody, res.StatusCode, res.Header, body); err != nil {
			t.Errorf("openapitest: %v", err)
		}
		return res, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// clip shortens a body for a message.
func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
