package mcpconfig

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// File is an mcp.json read entry by entry: the entries that are valid and
// the ones that are not, each with its reason. A bad entry never takes the
// others down.
type File struct {
	// Servers are the valid entries, in file order.
	Servers []Server
	// Invalid are the entries that did not validate, in file order.
	Invalid []Invalid
	// Notes are information lines about the file (keys of other tools that
	// were ignored), at most one per entry.
	Notes []string
}

// Invalid is an entry that did not validate.
type Invalid struct {
	// Name is the entry's key as written; ID the id it would have (Server.Name).
	Name, ID string
	// Line is where the entry starts (1-based).
	Line int
	// Err holds every problem of the entry, each a *ValidationError with the
	// file, line and column.
	Err error
}

// Reason is the entry's problems on one line.
func (iv Invalid) Reason() string {
	return strings.ReplaceAll(iv.Err.Error(), "\n", "; ")
}

// Err joins the problems of every invalid entry (nil when there are none).
func (f *File) Err() error {
	var errs []error
	for _, iv := range f.Invalid {
		errs = append(errs, iv.Err)
	}
	return errors.Join(errs...)
}

// LoadFile reads the mcp.json at path entry by entry. The error is set only
// when the file as a whole cannot be read (missing, wrapping ErrNotFound;
// not JSON or JSONC, with its line and column; no server object); a bad
// entry goes to File.Invalid.
func LoadFile(path string, opts Options) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", path, ErrNotFound)
		}
		return nil, fmt.Errorf("read mcp config: %w", err)
	}
	return ParseFileAt(path, data, opts)
}

// ParseFileAt parses data as LoadFile reads the file at path: relative
// paths resolve against its folder, ${workspaceFolder} is its workspace,
// and every error names path. It checks a file before it is written (an
// install asks the running tool runner whether it would load it).
func ParseFileAt(path string, data []byte, opts Options) (*File, error) {
	opts = opts.forFile(path)
	f, err := ParseFile(data, opts)
	if err != nil {
		return nil, withPath(err, path)
	}
	for i := range f.Invalid {
		f.Invalid[i].Err = withPath(f.Invalid[i].Err, path)
	}
	return f, nil
}

// forFile fills BaseDir and Workspace for the file at path.
func (opts Options) forFile(path string) Options {
	if opts.BaseDir == "" {
		opts.BaseDir = filepath.Dir(path)
	}
	if opts.Workspace == "" {
		lookup := opts.Lookup
		if lookup == nil {
			lookup = os.LookupEnv
		}
		if v, ok := lookup(WorkspaceEnv); ok && v != "" {
			opts.Workspace = v
		} else {
			opts.Workspace = WorkspaceOf(path)
		}
	}
	return opts
}

// MaxIDLen bounds the id made for an entry whose name is not tool-safe, so
// that "<id>__<tool>" stays within the model APIs' 64 characters for
// common tool names.
const MaxIDLen = 40

// ServerID is the stable tool-safe id of an entry named name: the name
// itself when it holds only letters, digits, '-' and '_' (at most
// MaxNameLen); else accented letters lose their marks, other letters are
// spelt "u<hex>", and runs of other characters ('/', '.', spaces) become
// '-' ("microsoft/playwright-mcp" -> "microsoft-playwright-mcp", "Dev Box
// MCP" -> "Dev-Box-MCP"). An id longer than MaxIDLen is cut and ends with 8
// hex digits of the name's SHA-256.
func ServerID(name string) string {
	if nameRE.MatchString(name) && len(name) <= MaxNameLen {
		return name
	}
	var b strings.Builder
	dash := false
	for _, r := range norm.NFD.String(name) {
		switch {
		case unicode.Is(unicode.Mn, r):
			continue
		case r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_'):
			b.WriteRune(r)
		case fold[r] != "":
			b.WriteString(fold[r])
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			fmt.Fprintf(&b, "u%x", r)
		default:
			if !dash && b.Len() > 0 {
				b.WriteByte('-')
				dash = true
			}
			continue
		}
		dash = false
	}
	id := strings.Trim(b.String(), "-")
	sum := sha256.Sum256([]byte(name))
	if id == "" {
		return "server-" + hex.EncodeToString(sum[:4])
	}
	if len(id) > MaxIDLen {
		id = strings.TrimRight(id[:MaxIDLen-9], "-") + "-" + hex.EncodeToString(sum[:4])
	}
	return id
}

// fold spells letters that lose no mark under NFD in ASCII.
var fold = map[rune]string{'ß': "ss", 'æ': "ae", 'Æ': "AE", 'ø': "o", 'Ø': "O", 'œ': "oe", 'Œ': "OE",
	'ł': "l", 'Ł': "L", 'đ': "d", 'Đ': "D", 'þ': "th", 'Þ': "TH", 'ð': "d", 'Ð': "D", 'ı': "i"}
