import CovenKit
import Foundation

/// `coven unpin`: stop keeping files offline.
struct UnpinCommand: Command {
    static let name = "unpin"
    static let abstract = "stop keeping files on this device"
    static let synopsis = ["FILE..."]
    static let discussion = """
    Their cached bytes count toward the budget again, and a trim may take them. A file in a \
    namespace the manifest declares kept stays kept. Prints the ids that were pinned, one a line.
    """
    static let options: [OptionSpec] = []
    static let arguments = [ArgumentSpec("FILE", help: "file ids", repeating: true, completion: .fileID)]
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        try KeptFilesChange.run(invocation, context, listedAs: "unpinned") { try KeptFiles($0).unpin($1) }
    }
}
