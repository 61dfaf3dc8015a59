// The graph readers of halogen::partition for SNAP edge lists, Matrix Market and METIS
// files: separators, comments, gzip, symmetric storage, and every kind of bad input with the
// file and line in its message.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "halogen/core/error.hpp"
#include "halogen/partition/readers.hpp"
#include "reader_testing.hpp"
#include "test_data.hpp"

namespace halogen {
namespace {

namespace fs = std::filesystem;
using test::pairs;
using test::Pairs;
using test::ScratchDir;
using test::write;

// ---- SNAP edge lists ------------------------------------------------------------------------

TEST(EdgeListReader, ReadsSeparatorsCommentsAndGzip) {
  ScratchDir dir("readers");
  const std::string text = "# SNAP header\n% other comment\n\n0 1\n1\t2\n2,3\n  3 , 4  \r\n4 4\n";
  write(dir / "g.txt", text);
  write(dir / "g.txt.gz", text, true);
  for (const char* name : {"g.txt", "g.txt.gz"}) {
    const EdgeList e = read_edge_list(dir / name);
    EXPECT_EQ(e.num_nodes, 5);
    EXPECT_EQ(pairs(e), (Pairs{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 4}}));
  }
  EXPECT_EQ(read_edge_list(dir / "g.txt", 10).num_nodes, 10);
  write(dir / "empty.txt", "# nothing\n");
  EXPECT_EQ(read_edge_list(dir / "empty.txt").num_nodes, 0);
}

TEST(EdgeListReader, RejectsBadInput) {
  ScratchDir dir("readers");
  auto bad = [&](const std::string& text) {
    write(dir / "bad.txt", text);
    return dir / "bad.txt";
  };
  EXPECT_READ_ERROR(read_edge_list(bad("0 1\n0 1 2\n")), "bad.txt' line 2", "expected 2 fields", "found 3");
  EXPECT_READ_ERROR(read_edge_list(bad("# c\n7\n")), "bad.txt' line 2", "found 1");
  EXPECT_READ_ERROR(read_edge_list(bad("0 1\n\na b\n")), "bad.txt' line 3", "source node id", "\"a\"");
  EXPECT_READ_ERROR(read_edge_list(bad("0 1.5\n")), "bad.txt' line 1", "destination node id");
  EXPECT_READ_ERROR(read_edge_list(bad("0,\n")), "bad.txt' line 1", "destination node id", "\"\"");
  EXPECT_READ_ERROR(read_edge_list(bad("0 1\n-1 2\n")), "bad.txt' line 2", "-1 is outside");
  EXPECT_READ_ERROR(read_edge_list(bad("3000000000 1\n")), "bad.txt' line 1", "3000000000 is outside");
  EXPECT_READ_ERROR(read_edge_list(bad("99999999999999999999 1\n")), "bad.txt' line 1", "64-bit");
  EXPECT_READ_ERROR(read_edge_list(bad("0 1\n1 4\n"), 4), "bad.txt' line 2", "4 is outside [0, 3]");
  EXPECT_READ_ERROR(read_edge_list(bad("0 1\n"), -1), "num_nodes -1");
}

// ---- Matrix Market --------------------------------------------------------------------------

TEST(MatrixMarketReader, GeneralAndSymmetric) {
  ScratchDir dir("readers");
  write(dir / "general.mtx",
        "%%MatrixMarket matrix coordinate pattern general\n% a comment\n%\n3 3 3\n1 2\n2 3\n3 3\n");
  const EdgeList g = read_matrix_market(dir / "general.mtx");
  EXPECT_EQ(g.num_nodes, 3);
  // Entry (i, j) is the edge j -> i.
  EXPECT_EQ(pairs(g), (Pairs{{1, 0}, {2, 1}, {2, 2}}));

  const std::string sym = "%%MatrixMarket matrix coordinate real symmetric\n4 4 3\n2 1 0.5\n3 1 -1e3\n4 4 2\n";
  write(dir / "sym.mtx.gz", sym, true);
  const EdgeList s = read_matrix_market(dir / "sym.mtx.gz");
  EXPECT_EQ(s.num_nodes, 4);
  EXPECT_EQ(pairs(s), (Pairs{{0, 1}, {1, 0}, {0, 2}, {2, 0}, {3, 3}}));
  const CsrGraph csr = build_csr(s);
  EXPECT_EQ(csr.num_edges(), 4);

  write(dir / "int.mtx", "%%matrixmarket MATRIX Coordinate INTEGER General\n2 2 2\n1 2 7\n2 1 -3\n");
  EXPECT_EQ(pairs(read_matrix_market(dir / "int.mtx")), (Pairs{{1, 0}, {0, 1}}));
  write(dir / "empty.mtx", "%%MatrixMarket matrix coordinate pattern symmetric\n5 5 0\n");
  const EdgeList empty = read_matrix_market(dir / "empty.mtx");
  EXPECT_EQ(empty.num_nodes, 5);
  EXPECT_EQ(empty.size(), 0u);
}

TEST(MatrixMarketReader, RejectsBadInput) {
  ScratchDir dir("readers");
  auto bad = [&](const std::string& text) {
    write(dir / "bad.mtx", text);
    return dir / "bad.mtx";
  };
  const std::string pattern = "%%MatrixMarket matrix coordinate pattern general\n";
  EXPECT_READ_ERROR(read_matrix_market(bad("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n")),
                    "bad.mtx' line 1", "'array' format is not supported");
  EXPECT_READ_ERROR(read_matrix_market(bad("%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n")),
                    "bad.mtx' line 1", "complex");
  EXPECT_READ_ERROR(read_matrix_market(bad("%%MatrixMarket matrix coordinate complex hermitian\n")), "complex");
  EXPECT_READ_ERROR(read_matrix_market(bad("%%MatrixMarket matrix coordinate real skew-symmetric\n1 1 0\n")),
                    "bad.mtx' line 1", "skew-symmetric matrices are not supported");
  EXPECT_READ_ERROR(read_matrix_market(bad("%%MatrixMarket matrix coordinate pattern hermitian\n1 1 0\n")),
                    "hermitian matrices are not supported");
  EXPECT_READ_ERROR(read_matrix_market(bad("3 3 1\n1 1\n")), "bad.mtx' line 1", "expected the banner");
  EXPECT_READ_ERROR(read_matrix_market(bad("")), "bad.mtx'", "empty");
  EXPECT_READ_ERROR(read_matrix_market(bad(pattern + "% only comments\n")), "before the size line");
  EXPECT_READ_ERROR(read_matrix_market(bad(pattern + "3 4 1\n1 1\n")), "bad.mtx' line 2", "square", "3 x 4");
  EXPECT_READ_ERROR(read_matrix_market(bad(pattern + "3 3\n1 1\n")), "bad.mtx' line 2", "expected 3 fields");
  EXPECT_READ_ERROR(read_matrix_market(bad(pattern + "3 3 3\n1 2\n2 3\n")), "ends after 2 entries",
                    "size line (line 2) declares 3");
  EXPECT_READ_ERROR(read_matrix_market(bad(pattern + "3 3 1\n1 2\n2 3\n")), "bad.mtx' line 4", "more entries");
  EXPECT_READ_ERROR(read_matrix_market(bad(pattern + "3 3 2\n1 2\n0 3\n")), "bad.mtx' line 4", "row index 0",
                    "outside [1, 3]");
  EXPECT_READ_ERROR(read_matrix_market(bad(pattern + "3 3 2\n1 4\n1 3\n")), "bad.mtx' line 3", "column index 4");
  EXPECT_READ_ERROR(read_matrix_market(bad(pattern + "3 3 1\n1 2 5.0\n")), "bad.mtx' line 3", "expected 2 fields",
                    "pattern");
  EXPECT_READ_ERROR(read_matrix_market(bad("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 1.0\n2 3\n")),
                    "bad.mtx' line 4", "expected 3 fields");
  EXPECT_READ_ERROR(read_matrix_market(bad("%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 2 1.5\n")),
                    "bad.mtx' line 3", "entry value (an integer)", "\"1.5\"");
  EXPECT_READ_ERROR(read_matrix_market(bad("%%MatrixMarket matrix coordinate real general\n3 3 1\n1 2 abc\n")),
                    "bad.mtx' line 3", "real value", "\"abc\"");
  EXPECT_READ_ERROR(read_matrix_market(bad(pattern + "3 3 1\n1 x\n")), "bad.mtx' line 3", "column index", "\"x\"");
}

// ---- METIS ----------------------------------------------------------------------------------

TEST(MetisReader, PlainGraph) {
  ScratchDir dir("readers");
  // Edges 1-2, 1-3, 2-3, 2-4; the last vertex line has no terminator.
  write(dir / "g.graph", "% METIS graph\n4 4\n2 3\n1 3 4\n% a comment between vertices\n1 2\n2");
  const EdgeList e = read_metis_graph(dir / "g.graph");
  EXPECT_EQ(e.num_nodes, 4);
  // Vertex v's line lists neighbours u, each giving the edge u -> v.
  EXPECT_EQ(pairs(e), (Pairs{{1, 0}, {2, 0}, {0, 1}, {2, 1}, {3, 1}, {0, 2}, {1, 2}, {1, 3}}));
  const CsrGraph g = build_csr(e, {.symmetrize = false});
  EXPECT_TRUE(g.is_symmetric());
  EXPECT_EQ(g.num_edges(), 8);
}

TEST(MetisReader, SkipsWeightsPerFmt) {
  ScratchDir dir("readers");
  const Pairs path3 = {{1, 0}, {0, 1}, {2, 1}, {1, 2}};
  // fmt 011, ncon 2: two vertex weights and an edge weight per neighbour.
  write(dir / "w.graph", "3 2 011 2\n5 1 2 7\n3 3 1 7 3 9\n1 1 2 9\n");
  EXPECT_EQ(pairs(read_metis_graph(dir / "w.graph")), path3);
  // fmt 1 = 001: edge weights only.
  write(dir / "ew.graph", "3 2 1\n2 4\n1 4 3 5\n2 5\n");
  EXPECT_EQ(pairs(read_metis_graph(dir / "ew.graph")), path3);
  // fmt 10: one vertex weight (ncon defaults to 1).
  write(dir / "vw.graph", "3 2 10\n4 2\n4 1 3\n4 2\n");
  EXPECT_EQ(pairs(read_metis_graph(dir / "vw.graph")), path3);
  // fmt 111 with ncon 1: size, weight, then neighbour/weight pairs; gzip.
  write(dir / "all.graph.gz", "3 2 111 1\n1 1 2 1\n1 1 1 1 3 1\n1 1 2 1\n", true);
  EXPECT_EQ(pairs(read_metis_graph(dir / "all.graph.gz")), path3);
  // fmt 100: vertex sizes only.
  write(dir / "vs.graph", "3 2 100\n9 2\n9 1 3\n9 2\n");
  EXPECT_EQ(pairs(read_metis_graph(dir / "vs.graph")), path3);
  // A blank vertex line is an isolated vertex; trailing blank lines after the last are fine.
  write(dir / "iso.graph", "4 1\n2\n1\n\n\n\n");
  const EdgeList iso = read_metis_graph(dir / "iso.graph");
  EXPECT_EQ(iso.num_nodes, 4);
  EXPECT_EQ(pairs(iso), (Pairs{{1, 0}, {0, 1}}));
}

TEST(MetisReader, RejectsBadInput) {
  ScratchDir dir("readers");
  auto bad = [&](const std::string& text) {
    write(dir / "bad.graph", text);
    return dir / "bad.graph";
  };
  EXPECT_READ_ERROR(read_metis_graph(bad("3 3\n2\n1 3\n2\n")), "bad.graph'", "4 neighbour entries",
                    "header (line 1) declares 3");
  EXPECT_READ_ERROR(read_metis_graph(bad("3 2\n2\n1 3\n")), "ends after 2 vertex lines", "declares 3");
  // 2 * m would overflow: the count is compared without computing it (found by fuzzing).
  EXPECT_READ_ERROR(read_metis_graph(bad("1 4611686018427387904\n\n")), "0 neighbour entries",
                    "declares 4611686018427387904");
  EXPECT_READ_ERROR(read_metis_graph(bad("% c\n3 2\n2\n1 3\n2\n1\n")), "bad.graph' line 6", "more vertex lines");
  EXPECT_READ_ERROR(read_metis_graph(bad("3 2\n2\n1 4\n2\n")), "bad.graph' line 3", "neighbour 4", "outside [1, 3]");
  EXPECT_READ_ERROR(read_metis_graph(bad("3 2\n0\n1 3\n2\n")), "bad.graph' line 2", "neighbour 0");
  EXPECT_READ_ERROR(read_metis_graph(bad("3 2\n2\n1 x\n2\n")), "bad.graph' line 3", "neighbour", "\"x\"");
  EXPECT_READ_ERROR(read_metis_graph(bad("3 2 1\n2 4\n1 4 3\n2 5\n")), "bad.graph' line 3", "pairs",
                    "neighbour 3 has no weight");
  EXPECT_READ_ERROR(read_metis_graph(bad("3 2 012\n")), "bad.graph' line 1", "fmt", "\"012\"");
  EXPECT_READ_ERROR(read_metis_graph(bad("3 2 0 2\n")), "bad.graph' line 1", "ncon = 2", "vertex weights");
  EXPECT_READ_ERROR(read_metis_graph(bad("3 2 10 2\n1\n1 1 3\n1 2\n")), "bad.graph' line 2",
                    "expected 2 vertex size/weight values", "found 1");
  EXPECT_READ_ERROR(read_metis_graph(bad("3\n")), "bad.graph' line 1", "2 to 4 integers", "found 1 field in");
  EXPECT_READ_ERROR(read_metis_graph(bad("3 2 1 1 1\n")), "bad.graph' line 1", "found 5 fields");
  EXPECT_READ_ERROR(read_metis_graph(bad("three 2\n")), "bad.graph' line 1", "vertex count", "\"three\"");
  EXPECT_READ_ERROR(read_metis_graph(bad("% only a comment\n")), "bad.graph'", "before the header");
}

}  // namespace
}  // namespace halogen
