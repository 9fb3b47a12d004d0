package console

import (
	"net"
	"net/http"
	"net/url"
	"strings"
)

// loopbackHost reports whether host (a Host header's name, without port)
// names this machine's loopback: localhost or a loopback address.
func loopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// localPort is the port the request came in on, "" when unknown.
func localPort(r *http.Request) string {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return ""
	}
	_, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return ""
	}
	return port
}

// hostAllowed reports whether a tokenless console may answer r: its Host
// is a loopback name or address with the console's own port. A page on a
// rebinding domain sends its own name and is refused.
func hostAllowed(r *http.Request) bool {
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		return false // a loopback console is always reached with its port
	}
	if !loopbackHost(host) {
		return false
	}
	own := localPort(r)
	return own == "" || port == own
}

// sameOrigin reports whether a state-changing request comes from a page of
// the console itself: its Origin, or when there is none its Referer, has
// the request's own host. A request with neither is refused.
func sameOrigin(r *http.Request) bool {
	from := r.Header.Get("Origin")
	if from == "" || from == "null" {
		from = r.Header.Get("Referer")
	}
	if from == "" {
		return false
	}
	u, err := url.Parse(from)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// consolePath returns p when it is a path on the console (for next and
// back), or "/" otherwise: no scheme, no host, no "//" or "\", no control
// characters (also percent-encoded), only an absolute path and query.
func consolePath(p string) string {
	if p == "" || p[0] != '/' || strings.HasPrefix(p, "//") || strings.ContainsAny(p, "\\") {
		return "/"
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f {
			return "/"
		}
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	dec, err := url.PathUnescape(u.Path)
	if err != nil || strings.HasPrefix(dec, "//") || strings.ContainsAny(dec, "\\") {
		return "/"
	}
	for _, c := range dec {
		if c < 0x20 || c == 0x7f {
			return "/"
		}
	}
	if strings.HasPrefix(strings.TrimLeft(dec, "/\t\r\n "), "/") {
		return "/"
	}
	return u.RequestURI()
}

// trusted refuses requests the console must not answer: on a console
// without a token a foreign Host (421), and on any console a
// state-changing request from another origin (403).
func (s *Service) trusted(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.sessions.loginRequired() && !hostAllowed(r) {
			s.log.Warn("console: request with a foreign Host refused", "host", r.Host, "remote", r.RemoteAddr)
			http.Error(w, "this console answers only on its loopback address (Host header refused)", http.StatusMisdirectedRequest)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
			s.log.Warn("console: cross-origin request refused", "path", r.URL.Path, "remote", r.RemoteAddr)
			http.Error(w, "request not from a console page (Origin or Referer missing or foreign)", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
