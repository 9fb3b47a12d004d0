package outbound

import (
	"net/url"
	"regexp"
	"strings"
)

var refRE = regexp.MustCompile(`\[\[ref:([^\[\]\s]{1,200})\]\]`)

// RenderRefs rewrites [[ref:id]] citations as Markdown links [ref:id](url)
// for destinations that render Markdown (GitHub, Sentry, OpenProject). A
// citation refURL has no URL for stays as it is.
func RenderRefs(md string, refURL func(id string) string) string {
	if refURL == nil || !strings.Contains(md, "[[ref:") {
		return md
	}
	return refRE.ReplaceAllStringFunc(md, func(m string) string {
		id := refRE.FindStringSubmatch(m)[1]
		u := refURL(id)
		if p, err := url.Parse(u); u == "" || err != nil || (p.Scheme != "http" && p.Scheme != "https") {
			return m
		}
		return "[ref:" + id + "](" + strings.NewReplacer("(", "%28", ")", "%29", " ", "%20").Replace(u) + ")"
	})
}

// RefBaseURL returns a resolver that links [[ref:id]] to base + escaped id
// (RELAY_REF_BASE_URL); an empty base resolves nothing.
func RefBaseURL(base string) func(id string) string {
	if base == "" {
		return nil
	}
	return func(id string) string { return base + url.PathEscape(id) }
}
