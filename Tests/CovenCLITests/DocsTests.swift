import CovenKit
import Foundation
import XCTest

@testable import coven

/// The docs pages against the registry and `--help` (as git's t0450 checks its pages against
/// `-h`), the exit-code table against ExitCodes, and the man page renderer.
final class DocsTests: XCTestCase {
    let docs = Repository.path("docs")

    /// The registry as the built binary prints it.
    private func registry() throws -> RegistryDump {
        let result = try Processes.coven(["__registry"])
        XCTAssertEqual(result.status, 0, result.stderrText)
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return try decoder.decode(RegistryDump.self, from: result.stdout)
    }

    private func page(_ name: String) -> String? {
        try? String(contentsOfFile: docs + "/" + name, encoding: .utf8)
    }

    /// The `usage:`/`or:` lines of a `--help` text.
    private func usageLines(_ help: String) -> [String] {
        help.components(separatedBy: "\n").prefix { !$0.isEmpty }.map { line in
            for prefix in ["usage: ", "   or: "] where line.hasPrefix(prefix) { return String(line.dropFirst(prefix.count)) }
            return line
        }
    }

    func testEveryCommandHasAPageAndEveryPageACommand() throws {
        let dump = try registry()
        XCTAssertNotNil(page("coven.md"), "docs/coven.md is missing: run 'make docs'")
        for command in dump.commands {
            XCTAssertNotNil(page("coven-\(command.name).md"),
                            "command '\(command.name)' has no page docs/coven-\(command.name).md: run 'make docs', then write its DESCRIPTION and EXAMPLES")
        }
        let names = Set(dump.commands.map { "coven-\($0.name).md" })
        for file in try FileManager.default.contentsOfDirectory(atPath: docs) where file.hasPrefix("coven-") && file.hasSuffix(".md") {
            XCTAssertTrue(names.contains(file), "docs/\(file) documents no registered command")
        }
    }

    func testSynopsisEqualsHelpUsage() throws {
        for command in try registry().commands {
            guard let text = page("coven-\(command.name).md") else { continue }
            let help = try Processes.coven([command.name, "--help"])
            XCTAssertEqual(help.status, 0, help.stderrText)
            XCTAssertEqual(DocsPages.synopsisLines(ofPage: text), usageLines(help.stdoutText),
                           "docs/coven-\(command.name).md: SYNOPSIS differs from 'coven \(command.name) --help': run 'make docs'")
        }
        let overview = try Processes.coven(["--help"])
        XCTAssertEqual(DocsPages.synopsisLines(ofPage: page("coven.md") ?? ""), usageLines(overview.stdoutText),
                       "docs/coven.md: SYNOPSIS differs from 'coven --help': run 'make docs'")
    }

    func testEveryOptionAndArgumentIsOnThePage() throws {
        let dump = try registry()
        for command in dump.commands {
            guard let text = page("coven-\(command.name).md") else { continue }
            let options = DocsPages.section("OPTIONS", ofPage: text) ?? ""
            for option in command.options {
                XCTAssertTrue(options.contains("`--\(option.long)"),
                              "docs/coven-\(command.name).md: OPTIONS does not list --\(option.long): run 'make docs'")
                if let short = option.short {
                    XCTAssertTrue(options.contains("`-\(short)`"),
                                  "docs/coven-\(command.name).md: OPTIONS does not list -\(short): run 'make docs'")
                }
            }
            for argument in command.arguments {
                XCTAssertTrue(options.contains("`\(argument.name)`"),
                              "docs/coven-\(command.name).md: OPTIONS does not list \(argument.name): run 'make docs'")
            }
        }
        let overview = DocsPages.section("OPTIONS", ofPage: page("coven.md") ?? "") ?? ""
        for option in dump.globalOptions {
            XCTAssertTrue(overview.contains("`--\(option.long)"), "docs/coven.md: OPTIONS does not list --\(option.long)")
        }
    }

    func testPagesHaveTheirSectionsAndNoSkeletonLeft() throws {
        let dump = try registry()
        for file in ["coven.md"] + dump.commands.map({ "coven-\($0.name).md" }) {
            guard let text = page(file) else { continue }
            let sections = DocsPages.sections(ofPage: text)
            let present = sections.filter { DocsPages.requiredSections.contains($0) }
            XCTAssertEqual(present, DocsPages.requiredSections, "docs/\(file): needs the sections \(DocsPages.requiredSections.joined(separator: ", ")), in that order")
            XCTAssertFalse(text.contains(DocsPages.fillInMarker), "docs/\(file) still holds skeleton text ('\(DocsPages.fillInMarker) …'): write it")
            XCTAssertTrue(text.hasPrefix("# \(file.dropLast(3))(1)\n"), "docs/\(file): the first line is '# \(file.dropLast(3))(1)'")
        }
    }

    /// The generated blocks are what `make docs` would write now (in-process: the same code).
    func testGeneratedBlocksAreCurrent() throws {
        for page in DocsPages.pages(.current()) {
            guard let text = self.page(page.fileName) else { continue }
            XCTAssertTrue(try DocsPages.update(text, page) == text, "docs/\(page.fileName) is stale: run 'make docs'")
        }
    }

    func testDocsCheckReportsAMissingPage() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("coven-docs-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let check = try Processes.coven(["__docs", "--check", folder])
        XCTAssertNotEqual(check.status, 0)
        XCTAssertTrue(check.stderrText.contains("coven-completions.md: missing"), check.stderrText)
        let write = try Processes.coven(["__docs", folder])
        XCTAssertEqual(write.status, 0, write.stderrText)
        XCTAssertEqual(try Processes.coven(["__docs", "--check", folder]).status, 0)
        let skeleton = try String(contentsOfFile: folder + "/coven-completions.md", encoding: .utf8)
        XCTAssertTrue(skeleton.contains(DocsPages.fillInMarker), "a new page starts as a skeleton to fill in")
    }

    func testUpdateKeepsProseAndRefusesLostMarkers() throws {
        // The completions command by name: the registry's order is not this test's business
        // (it took the first command, which stopped being `completions` when `init` came first).
        let dump = RegistryDump.current()
        let page = DocsPages.page(try XCTUnwrap(dump.commands.first { $0.name == "completions" }), dump)
        var text = DocsPages.skeleton(page)
        text = text.replacingOccurrences(of: "coven completions SHELL", with: "coven completions OLD")
        text += "\nhand-written words\n"
        let updated = try DocsPages.update(text, page)
        XCTAssertTrue(updated.contains("coven completions SHELL\n"))
        XCTAssertFalse(updated.contains("OLD"))
        XCTAssertTrue(updated.hasSuffix("\nhand-written words\n"))
        let broken = text.replacingOccurrences(of: DocsPages.beginMarker("options"), with: "")
        XCTAssertThrowsError(try DocsPages.update(broken, page))
    }

    // MARK: - Exit codes

    func testExitCodesPageListsEveryCodeWithItsStatus() throws {
        let text = try XCTUnwrap(page("exit-codes.md"))
        var documented: [String: Int32] = [:]
        for line in text.components(separatedBy: "\n") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 3, cells[0].hasPrefix("`"), cells[0].hasSuffix("`"), let status = Int32(cells[1]) else { continue }
            let code = String(cells[0].dropFirst().dropLast())
            XCTAssertNil(documented[code], "docs/exit-codes.md lists '\(code)' twice")
            documented[code] = status
        }
        for code in ErrorCode.allCases {
            XCTAssertEqual(documented[code.rawValue], ExitCodes.code(for: code),
                           "docs/exit-codes.md: '\(code.rawValue)' must be listed with status \(ExitCodes.code(for: code))")
        }
        let known = Set(ErrorCode.allCases.map(\.rawValue))
        for code in documented.keys where !known.contains(code) {
            XCTFail("docs/exit-codes.md lists '\(code)', which coven does not have")
        }
        for status in Set(ErrorCode.allCases.map(ExitCodes.code(for:))) {
            XCTAssertTrue(text.contains("\n| \(status) |"), "docs/exit-codes.md: the statuses table lacks \(status)")
        }
    }

    // MARK: - Man pages

    func testManRendererBlocks() {
        let roff = ManPage(source: "coven 9").render("""
            # coven-x(1)

            <!-- a comment
            over lines -->
            ## NAME

            coven-x - does x

            ## OPTIONS

            | option | meaning |
            |---|---|
            | `-z`, `--null` | end records with NUL \\| not newline |

            - a *list* item
              continued
            1. numbered

            ```
            .starts with a dot
            back\\slash
            ```

            A [link](https://x) and **bold** and snake_case_name.
            """)
        XCTAssertEqual(roff, """
            .\\" Generated by coven __man from the markdown docs page; do not edit.
            .TH "COVEN\\-X" "1" "" "coven 9" "coven manual"
            .SH "NAME"
            .PP
            coven\\-x \\- does x
            .SH "OPTIONS"
            .TP
            \\fB\\-z\\fR, \\fB\\-\\-null\\fR
            end records with NUL | not newline
            .IP \\(bu 2
            a \\fIlist\\fR item
            continued
            .IP 1. 4
            numbered
            .PP
            .RS 4
            .nf
            \\&.starts with a dot
            back\\eslash
            .fi
            .RE
            .PP
            A link and \\fBbold\\fR and snake_case_name.

            """)
    }

    func testEveryPageRendersWithoutRoffWarnings() throws {
        let groff = Processes.which("groff", path: ProcessInfo.processInfo.environment["PATH"] ?? "")
        let renderer = ManPage(source: "coven \(CLI.version)")
        for file in try FileManager.default.contentsOfDirectory(atPath: docs) where file == "coven.md" || file.hasPrefix("coven-") {
            let roff = renderer.render(try XCTUnwrap(page(file)))
            XCTAssertTrue(roff.contains(".TH "), file)
            XCTAssertFalse(roff.contains("<!--"), file)
            guard let groff else { continue }
            let input = FileManager.default.temporaryDirectory.appendingPathComponent("coven-\(UUID().uuidString).1").path
            try roff.write(toFile: input, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(atPath: input) }
            let result = try Processes.run(groff, ["-man", "-Tutf8", "-ww", "-z", input], environment: ["PATH": "/usr/bin:/bin"], directory: "/")
            XCTAssertEqual(result.status, 0, file)
            XCTAssertEqual(result.stderrText, "", "groff warns about the man page of docs/\(file)")
        }
    }
}
