package mappers

import (
	"fmt"
	"mime"
	"strings"
)

// ContentTypeError reports a body that could not be parsed and was sent with
// a content type its route does not take: curl's -d, for one, sends
// application/x-www-form-urlencoded to a route that takes JSON. The gateway
// names it in its 400 answer.
type ContentTypeError struct {
	// Got is the request's Content-Type, cut to 100 bytes.
	Got string
	// Want is what the route takes ("application/json").
	Want string
	// Err is why the body did not parse.
	Err error
}

func (e *ContentTypeError) Error() string {
	return fmt.Sprintf("Content-Type %q: this route takes %s (%v)", e.Got, e.Want, e.Err)
}

func (e *ContentTypeError) Unwrap() error { return e.Err }

// Hint is the sentence the gateway answers with: the content type sent and
// the one to send instead.
func (e *ContentTypeError) Hint() string {
	return fmt.Sprintf("Content-Type %q is not %s; send the body with Content-Type: %s", e.Got, e.Want, e.Want)
}

// JSON and Form are the content types routes take.
const (
	JSON = "application/json"
	Form = "application/x-www-form-urlencoded"
)

// CheckContentType returns err, the reason r's body did not parse, as a
// *ContentTypeError when r was sent with a Content-Type other than want
// (JSON also matches any application/*+json), and err as it is otherwise
// (no Content-Type, or the right one): called on the failure path only.
func CheckContentType(r *Request, want string, err error) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return err
	}
	mt, _, perr := mime.ParseMediaType(ct)
	if perr == nil && (mt == want || want == JSON && strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return err
	}
	if len(ct) > 100 {
		ct = ct[:100]
	}
	return &ContentTypeError{Got: ct, Want: want, Err: err}
}
