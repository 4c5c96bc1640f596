package shard

import (
	"slices"

	"github.com/emsf/emsf/factor"
)

// DGroup is one row group of D in the owners exchange: rows of D block
// DBlock (the action; 0 under --tie shared-d) that one owner holds and
// whose D̂ it folds, left to right over the shards Cells (indices, in
// shard order) that hold them. It is metadata: what a coordinator that
// holds no shard plans and places with.
type DGroup struct {
	DBlock int
	Cells  []int
	// Lo and Hi bound the group's rows: its first row and its last
	// row + 1 (both 0 when it has none).
	Lo, Hi int
	// Rows is the number of rows in the group's row list.
	Rows int
	// RowsCRC is the CRC-32C (hex, as the owners exchange writes CRCs)
	// of the row list as stored (little-endian int32, ascending), filled
	// in by whoever stores the list; the group's owner checks the list
	// it reads against it.
	RowsCRC string
}

// CutDGroups cuts the rows of D into the groups that owners hold, and
// returns them with their row lists (rows[g] ascending; RowsCRC is left
// empty for whoever stores the lists). Each row range (RowGroups: a
// shard, or the column cells of one range) is cut into as many groups as
// the data has column cells in a range at most, of consecutive present
// rows balanced by count. The cut depends on the data and --col-cells
// only (a checkpoint's groups fit any later placement) and changes no
// sum: a row's D̂ is folded over the range's cells whoever owns it.
// Cutting a range lets the p_c workers of a grid row each own 1/p_c of
// its rows, so that each folds and serves n/(p_r·p_c) rows.
//
// With --tie shared-d every action's shards add to the rows of the one D:
// its rows (of every shard) are cut into as many groups as the actions
// have ranges at most, times the column cells, each with the shards (of
// any action) whose row range meets it. A row's D̂ is then the left fold
// over actions ascending and cells in order, the order of the local pass
// (shards are numbered by action first).
func CutDGroups(shards []*Shard, tie factor.Tie) ([]DGroup, [][]int32) {
	infos := make([]Info, len(shards))
	for k, sh := range shards {
		infos[k] = sh.Info
	}
	ranges := RowGroups(infos)
	q := 0
	for _, cells := range ranges {
		q = max(q, len(cells))
	}
	if tie == factor.TieSharedD {
		return sharedDGroups(shards, len(ranges), q)
	}
	var out []DGroup
	var lists [][]int32
	for _, cells := range ranges {
		var rows []int32
		if len(cells) == 1 {
			rows = shards[cells[0]].Block.Rows
		} else {
			for _, k := range cells {
				rows = append(rows, shards[k].Block.Rows...)
			}
			slices.Sort(rows)
			rows = slices.Compact(rows)
		}
		gs, ls := CutRange(shards[cells[0]].Action, cells, rows, q)
		out, lists = append(out, gs...), append(lists, ls...)
	}
	return out, lists
}

// CutRange cuts one row range's present rows (rows: ascending, the union
// of its cells' rows; cells: the range's shards in order) into its row
// groups of D block dblock: q parts of consecutive rows balanced by count
// (fewer when the range has fewer rows; one, possibly empty, when it has
// none), q being the most column cells any row range of the data has.
// CutDGroups cuts every range so; a node that builds one range's shards
// cuts its range alone, given q, and gets the same groups.
func CutRange(dblock int, cells []int, rows []int32, q int) ([]DGroup, [][]int32) {
	var out []DGroup
	var lists [][]int32
	parts := min(max(q, 1), max(1, len(rows)))
	for b := range parts {
		part := rows[b*len(rows)/parts : (b+1)*len(rows)/parts]
		if len(part) > 0 || b == 0 {
			out = append(out, newDGroup(dblock, cells, part))
			lists = append(lists, part)
		}
	}
	return out, lists
}

// sharedDGroups is CutDGroups under --tie shared-d: ranges row ranges
// (of all actions), q column cells.
func sharedDGroups(shards []*Shard, ranges, q int) ([]DGroup, [][]int32) {
	var rows []int32
	perAction := map[int]int{}
	for _, sh := range shards {
		rows = append(rows, sh.Block.Rows...)
		if sh.ColLo == 0 {
			perAction[sh.Action]++
		}
	}
	slices.Sort(rows)
	rows = slices.Compact(rows)
	most := 1
	for _, r := range perAction {
		most = max(most, r)
	}
	parts := min(max(1, most*max(1, q)), max(1, len(rows)))
	var out []DGroup
	var lists [][]int32
	for b := range parts {
		part := rows[b*len(rows)/parts : (b+1)*len(rows)/parts]
		if len(part) == 0 && b > 0 {
			continue
		}
		var cells []int
		for k, sh := range shards {
			if len(part) > 0 && sh.RowLo <= int(part[len(part)-1]) && int(part[0]) < sh.RowHi {
				cells = append(cells, k)
			}
		}
		if len(cells) == 0 {
			// Only when there are no rows at all: a group needs a cell.
			cells = []int{0}
		}
		out = append(out, newDGroup(0, cells, part))
		lists = append(lists, part)
	}
	return out, lists
}

func newDGroup(dblock int, cells []int, rows []int32) DGroup {
	g := DGroup{DBlock: dblock, Cells: cells, Rows: len(rows)}
	if len(rows) > 0 {
		g.Lo, g.Hi = int(rows[0]), int(rows[len(rows)-1])+1
	}
	return g
}

// Describe fills in each shard's Info.Rows and Info.DataTerm from its
// block (the data term's shares with each row range's totals:
// factor.DataTerms), so that its lines say all a planner needs of it.
func Describe(shards []*Shard) {
	terms := factor.DataTerms(Blocks(shards))
	for k, sh := range shards {
		sh.Rows, sh.DataTerm = len(sh.Block.Rows), terms[k]
	}
}
