// Package schemas embeds the project's JSON Schemas (draft-07): the MCP message
// envelope and, as later components add them, the mcp.json, hooks and policy files.
//
// The files are the source of truth for the contracts in docs/DESIGN.md; Go types in
// other packages mirror them and validate against them.
package schemas

import "embed"

// FS holds every *.schema.json file of this directory.
//
//go:embed *.schema.json
var FS embed.FS

// MCPMessage is the file name of the envelope schema inside FS.
const MCPMessage = "mcp-message.schema.json"
