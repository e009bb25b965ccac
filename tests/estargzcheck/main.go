// estargz-verify: reads eStargz blobs as stargz-snapshotter does, through Debian's copy of its estargz package.
//
// Usage: estargz-verify BLOB TOC_DIGEST [NAME...]
//
// Opens BLOB with estargz.Open (footer, TOC), checks the TOC against TOC_DIGEST (VerifyTOC, as the snapshotter
// checks the layer descriptor's containerd.io/snapshot/stargz/toc.digest), then reads every chunk of every regular
// file from its gzip member and checks it against the TOC's chunkDigest. Prints one JSON object: the TOC digest,
// the files and chunks verified, the landmark's name and offset (what the snapshotter prefetches is the blob before
// it), and the offset of each NAME's first chunk (-1: not in the layer). Exit 1 with the reason on any failure.
package main

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/containerd/stargz-snapshotter/estargz"
	digest "github.com/opencontainers/go-digest"
)

type checker struct {
	blob *io.SectionReader
	r    *estargz.Reader
	v    estargz.TOCEntryVerifier
	out  report
}

type report struct {
	TOCDigest      string           `json:"toc_digest"`
	Files          int              `json:"files"`
	Chunks         int              `json:"chunks"`
	Landmark       string           `json:"landmark"`
	LandmarkOffset int64            `json:"landmark_offset"`
	Offsets        map[string]int64 `json:"offsets"`
}

func main() {
	if len(os.Args) < 3 {
		fail(fmt.Errorf("usage: estargz-verify BLOB TOC_DIGEST [NAME...]"))
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fail(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		fail(err)
	}
	blob := io.NewSectionReader(f, 0, st.Size())
	r, err := estargz.Open(blob)
	if err != nil {
		fail(fmt.Errorf("estargz.Open: %w", err))
	}
	want, err := digest.Parse(os.Args[2])
	if err != nil {
		fail(err)
	}
	v, err := r.VerifyTOC(want)
	if err != nil {
		fail(fmt.Errorf("VerifyTOC: %w", err))
	}
	c := &checker{blob: blob, r: r, v: v, out: report{TOCDigest: r.TOCDigest().String(), Offsets: map[string]int64{}}}
	root, ok := r.Lookup("")
	if !ok {
		fail(fmt.Errorf("no root in the TOC"))
	}
	if err := c.walk(root, ""); err != nil {
		fail(err)
	}
	out := &c.out
	for _, name := range []string{estargz.PrefetchLandmark, estargz.NoPrefetchLandmark} {
		if e, ok := r.Lookup(name); ok {
			out.Landmark, out.LandmarkOffset = name, e.Offset
		}
	}
	for _, name := range os.Args[3:] {
		out.Offsets[name] = -1
		if e, ok := r.ChunkEntryForOffset(name, 0); ok {
			out.Offsets[name] = e.Offset
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err)
	}
}

// walk verifies every regular file under dir (hard links are the same entry: verified once per name, harmless).
func (c *checker) walk(dir *estargz.TOCEntry, name string) error {
	var err error
	dir.ForeachChild(func(base string, e *estargz.TOCEntry) bool {
		child := path.Join(name, base)
		switch {
		case e.Type == "dir":
			err = c.walk(e, child)
		case e.Type == "reg" && e.Size > 0:
			err = c.verifyFile(child, e.Size)
		}
		return err == nil
	})
	return err
}

// verifyFile reads each chunk of a file from its own gzip member (the range the snapshotter fetches for it) and
// checks it against the TOC's chunkDigest.
func (c *checker) verifyFile(name string, size int64) error {
	for off := int64(0); off < size; {
		ce, ok := c.r.ChunkEntryForOffset(name, off)
		if !ok {
			return fmt.Errorf("%s: no chunk at offset %d", name, off)
		}
		member := io.NewSectionReader(c.blob, ce.Offset, ce.NextOffset()-ce.Offset)
		zr, err := gzip.NewReader(member)
		if err != nil {
			return fmt.Errorf("%s: chunk at %d: %w", name, ce.Offset, err)
		}
		data := make([]byte, ce.ChunkSize)
		if _, err := io.ReadFull(zr, data); err != nil {
			return fmt.Errorf("%s: chunk at %d: %w", name, ce.Offset, err)
		}
		cv, err := c.v.Verifier(ce)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		cv.Write(data)
		if !cv.Verified() {
			return fmt.Errorf("%s: chunk at offset %d does not match its chunkDigest", name, ce.ChunkOffset)
		}
		c.out.Chunks++
		off = ce.ChunkOffset + ce.ChunkSize
	}
	c.out.Files++
	return nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "estargz-verify:", err)
	os.Exit(1)
}
