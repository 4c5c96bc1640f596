package arrowio

import (
	"fmt"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/schema"
)

// What emsf reads of a Parquet file's schema: its top-level columns, each
// a leaf column of numbers or bytes, a list of doubles (a model's values),
// or something emsf refuses, described in Parquet's own terms so that the
// error says what the file holds.
//
//	INT32, INT64            int32, int64; INT(w, signed) annotations give
//	                        int8 … int64 and uint8 … uint64 (w ≤ 32 on
//	                        INT32, 64 on INT64)
//	FLOAT, DOUBLE           float32, float64
//	BYTE_ARRAY              string when annotated STRING, binary bare
//	BOOLEAN                 bool (never read: the scan and the model
//	                        readers refuse it by its Arrow type, as they
//	                        refuse it in Arrow IPC files)
//	group (List) of DOUBLE  list<float64>: the three-level list
//	                        <opt|req> group (LIST) { repeated group { <opt|req> double } }
//
// Anything else (other annotations, INT96, FIXED_LEN_BYTE_ARRAY, repeated
// columns, structs, maps, other lists) has no Arrow type here. The Arrow
// schema a writer may have stored in the key-value metadata
// (arrowSchemaKey) is verified (a corrupt one fails the file) but not
// applied: strings stored as large or dictionary strings read as strings,
// fixed-size lists as lists (the model readers check the lengths).

// pqTop is a top-level column of a Parquet file.
type pqTop struct {
	name     string
	leaf     int            // its leaf column (a list's element), -1 for other groups
	list     bool           // a list of doubles
	nullable bool           // the column (for a list: the list itself) is optional
	typ      arrow.DataType // what it reads as; nil when emsf does not read it
	parquet  string         // its Parquet type, for errors
}

// refused is the error for reading a column emsf does not read.
func (c *pqTop) refused() error {
	return fmt.Errorf("column %q has Parquet type %s, which emsf does not read", c.name, c.parquet)
}

// pqManifest lists the top-level columns of a Parquet file.
type pqManifest struct {
	descr *schema.Schema
	cols  []pqTop
}

func newPQManifest(sc *schema.Schema) *pqManifest {
	m := &pqManifest{descr: sc, cols: make([]pqTop, sc.Root().NumFields())}
	for i := range m.cols {
		m.cols[i] = pqTopOf(sc, sc.Root().Field(i))
	}
	return m
}

func pqTopOf(sc *schema.Schema, n schema.Node) pqTop {
	c := pqTop{name: n.Name(), leaf: -1, nullable: n.RepetitionType() == parquet.Repetitions.Optional}
	if n.RepetitionType() == parquet.Repetitions.Repeated {
		c.parquet = "repeated " + pqTypeName(n)
		return c
	}
	c.parquet = pqTypeName(n)
	if p, ok := n.(*schema.PrimitiveNode); ok {
		c.leaf, c.typ = sc.ColumnIndexByNode(p), pqLeafType(p)
		return c
	}
	if elem := pqListElement(n.(*schema.GroupNode)); elem != nil {
		c.parquet += " of " + pqTypeName(elem)
		if pqLeafType(elem) == arrow.PrimitiveTypes.Float64 {
			c.leaf, c.list, c.typ = sc.ColumnIndexByNode(elem), true, arrow.ListOf(arrow.PrimitiveTypes.Float64)
		}
	}
	return c
}

// pqListElement returns the element of a three-level list, nil when g is
// not one or its element is not a leaf.
func pqListElement(g *schema.GroupNode) *schema.PrimitiveNode {
	if !g.LogicalType().Equals(schema.NewListLogicalType()) || g.NumFields() != 1 {
		return nil
	}
	rep, ok := g.Field(0).(*schema.GroupNode)
	if !ok || rep.RepetitionType() != parquet.Repetitions.Repeated || rep.NumFields() != 1 {
		return nil
	}
	elem, ok := rep.Field(0).(*schema.PrimitiveNode)
	if !ok || elem.RepetitionType() == parquet.Repetitions.Repeated {
		return nil
	}
	return elem
}

// pqLeafType is the Arrow type of a leaf column as the table above says,
// nil for the others.
func pqLeafType(p *schema.PrimitiveNode) arrow.DataType {
	lt := p.LogicalType()
	bare := lt == nil || lt.IsNone()
	switch p.PhysicalType() {
	case parquet.Types.Int32, parquet.Types.Int64:
		wide := p.PhysicalType() == parquet.Types.Int64
		if bare {
			if wide {
				return arrow.PrimitiveTypes.Int64
			}
			return arrow.PrimitiveTypes.Int32
		}
		it, ok := lt.(*schema.IntLogicalType)
		if !ok || (it.BitWidth() == 64) != wide {
			return nil
		}
		return pqIntType(it.BitWidth(), it.IsSigned())
	case parquet.Types.Float:
		if bare {
			return arrow.PrimitiveTypes.Float32
		}
	case parquet.Types.Double:
		if bare {
			return arrow.PrimitiveTypes.Float64
		}
	case parquet.Types.ByteArray:
		if bare {
			return arrow.BinaryTypes.Binary
		}
		if _, ok := lt.(schema.StringLogicalType); ok {
			return arrow.BinaryTypes.String
		}
	case parquet.Types.Boolean:
		if bare {
			return arrow.FixedWidthTypes.Boolean
		}
	}
	return nil
}

func pqIntType(bits int8, signed bool) arrow.DataType {
	types := map[int8][2]arrow.DataType{
		8:  {arrow.PrimitiveTypes.Uint8, arrow.PrimitiveTypes.Int8},
		16: {arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Int16},
		32: {arrow.PrimitiveTypes.Uint32, arrow.PrimitiveTypes.Int32},
		64: {arrow.PrimitiveTypes.Uint64, arrow.PrimitiveTypes.Int64},
	}
	t, ok := types[bits]
	if !ok {
		return nil
	}
	return t[btoi(signed)]
}

// pqTypeName describes a node's type: its physical type and annotation
// ("INT32 (Date)", "FIXED_LEN_BYTE_ARRAY(16)"), or the kind of group
// ("group (struct)", "group (List)", "group (Map)").
func pqTypeName(n schema.Node) string {
	lt := n.LogicalType()
	note := ""
	if lt != nil && !lt.IsNone() {
		note = " (" + lt.String() + ")"
	}
	p, ok := n.(*schema.PrimitiveNode)
	if !ok {
		if note == "" {
			note = " (struct)"
		}
		return "group" + note
	}
	name := p.PhysicalType().String()
	if p.PhysicalType() == parquet.Types.FixedLenByteArray {
		name = fmt.Sprintf("%s(%d)", name, p.TypeLength())
	}
	return name + note
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
