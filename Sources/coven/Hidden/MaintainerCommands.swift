import CovenKit
import Foundation

// Commands for the Makefile and the tests, listed in ``CommandRegistry/hidden``: dispatched like
// any command, absent from help, docs and completions. Their names start with `__` so that no
// real command can clash with them.

/// `coven __docs DIR [--check]`: creates the missing docs pages as skeletons and rewrites the
/// generated blocks of the others (`make docs`); with `--check`, changes nothing and fails
/// listing the pages that are missing or stale.
struct DocsGeneratorCommand: Command {
    static let name = "__docs"
    static let abstract = "write or check the generated parts of the docs pages"
    static let synopsis = ["[--check] DIR"]
    static let options = [OptionSpec("check", help: "change nothing; fail when a page is missing or stale")]
    static let arguments = [ArgumentSpec("DIR", help: "the docs folder", completion: .directory)]
    static let mutates = false

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let folder = invocation.arguments[0]
        let check = invocation.has("check")
        var problems: [String] = []
        for page in DocsPages.pages(.current()) {
            let path = folder + "/" + page.fileName
            let existing = try? String(contentsOfFile: path, encoding: .utf8)
            let text = try existing.map { try DocsPages.update($0, page) } ?? DocsPages.skeleton(page)
            if text == existing { continue }
            if check {
                problems.append(existing == nil ? "\(path): missing" : "\(path): stale")
                continue
            }
            try GeneratedFiles.write(text, to: path)
            context.note(existing == nil ? "created '\(path)': write its DESCRIPTION and EXAMPLES" : "updated '\(path)'")
        }
        guard problems.isEmpty else {
            for problem in problems { context.err.write(problem + "\n") }
            throw CovenError(.io, "\(problems.count.counted("docs page")) missing or stale", hint: "run 'make docs'")
        }
        return ExitCodes.success
    }
}

/// `coven __man DOCS OUT`: renders `DOCS/coven.md` and every `DOCS/coven-*.md` to
/// `OUT/<page>.1` (`make docs`).
struct ManRendererCommand: Command {
    static let name = "__man"
    static let abstract = "render the docs pages to roff man pages"
    static let synopsis = ["DOCS OUT"]
    static let options: [OptionSpec] = []
    static let arguments = [
        ArgumentSpec("DOCS", help: "the docs folder", completion: .directory),
        ArgumentSpec("OUT", help: "the folder for the man pages", completion: .directory),
    ]
    static let mutates = false

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let (docs, out) = (invocation.arguments[0], invocation.arguments[1])
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: docs)
        } catch {
            throw CovenError(.io, "cannot list '\(docs)'", cause: error.localizedDescription)
        }
        let renderer = ManPage(source: "coven \(CLI.version)")
        for name in names.sorted() where name.hasSuffix(".md") && (name == "coven.md" || name.hasPrefix("coven-")) {
            let markdown: String
            do {
                markdown = try String(contentsOfFile: docs + "/" + name, encoding: .utf8)
            } catch {
                throw CovenError(.io, "cannot read '\(docs)/\(name)'", cause: error.localizedDescription)
            }
            let target = out + "/" + name.dropLast(3) + ".1"
            try GeneratedFiles.write(renderer.render(markdown), to: target)
            context.line(target)
        }
        return ExitCodes.success
    }
}

/// `coven __registry`: prints the ``RegistryDump`` as JSON.
struct RegistryDumpCommand: Command {
    static let name = "__registry"
    static let abstract = "print the command registry as JSON"
    static let synopsis = [""]
    static let options: [OptionSpec] = []
    static let mutates = false

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        context.line(try RegistryDump.current().json())
        return ExitCodes.success
    }
}

/// Writing the generated files.
enum GeneratedFiles {
    /// Writes `text` to `path` (through a temporary file and a rename), creating its folder.
    static func write(_ text: String, to path: String) throws {
        let folder = (path as NSString).deletingLastPathComponent
        do {
            if !folder.isEmpty {
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            }
            try Data(text.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            throw CovenError(.io, "cannot write '\(path)'", cause: error.localizedDescription)
        }
    }
}
