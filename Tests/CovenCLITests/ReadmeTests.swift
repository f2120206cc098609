import CovenTestSupport
import Foundation
import XCTest

/// The README's quick start and its two-device part run as written: their `sh` blocks, in
/// order, in one `sh -e` with a fresh HOME and the coven under test on PATH.
final class ReadmeTests: XCTestCase {
    /// The `sh` blocks of the README's sections from "Quick start" up to (not including) the
    /// first section after "Two devices".
    static func quickStartBlocks(_ readme: String) -> [String] {
        var blocks: [String] = []
        var section = ""
        var inBlock = false
        var block: [Substring] = []
        for line in readme.split(separator: "\n", omittingEmptySubsequences: false) {
            if !inBlock, line.hasPrefix("## ") { section = String(line.dropFirst(3)) }
            let wanted = section.hasPrefix("Quick start") || section.hasPrefix("Two devices")
            if !inBlock, line == "```sh", wanted {
                inBlock = true
                block = []
            } else if inBlock, line == "```" {
                inBlock = false
                blocks.append(block.joined(separator: "\n"))
            } else if inBlock {
                block.append(line)
            }
        }
        return blocks
    }

    func testTheQuickStartAndTwoDevicesRunAsWritten() throws {
        let readme = try String(contentsOfFile: Repository.path("README.md"), encoding: .utf8)
        let blocks = Self.quickStartBlocks(readme)
        let script = blocks.joined(separator: "\n")
        for needed in ["coven init", "coven stage", "coven upload-worker", "coven cat", "coven key export", "coven join", "coven sync", "coven --db"] {
            XCTAssertTrue(script.contains(needed), "the quick start shows '\(needed)'")
        }

        let work = try TestPaths.temporaryDirectory("readme")
        defer { try? FileManager.default.removeItem(atPath: work) }
        let binary = try Repository.covenBinary()
        let environment = GoldenEnvironment.make(work: work, binary: binary)
        try FileManager.default.createDirectory(atPath: work + "/home", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: work + "/tmp", withIntermediateDirectories: true)
        // `make` is the build: the coven under test is already first on PATH.
        let prelude = "make() { :; }\n"
        try (prelude + script + "\n").write(toFile: work + "/quick-start.sh", atomically: true, encoding: .utf8)
        let result = try Processes.run("/bin/sh", ["-e", work + "/quick-start.sh"], environment: environment, directory: work, timeout: 300)
        XCTAssertEqual(result.status, 0, "the README's quick start failed:\n" + result.stderrText)
        XCTAssertFalse(result.timedOut)
        // The laptop lists both songs: the first device's and the one it synced over.
        XCTAssertTrue(result.stdoutText.contains("a song\nanother song\n"), result.stdoutText)
        XCTAssertTrue(result.stdoutText.contains("\"stored\" : 1") || result.stdoutText.contains("\"stored\": 1"), result.stdoutText)
    }
}
