import CovenKit
import Foundation

/// `coven retry`: try failed uploads again now.
struct RetryCommand: Command {
    static let name = "retry"
    static let abstract = "try failed or waiting uploads again now, with a fresh attempts budget"
    static let synopsis = ["[FILE...]"]
    static let discussion = """
    Makes failed uploads, and uploads waiting for a retry, eligible again at once with a fresh \
    attempts budget: every one, or those of the files named. A running worker picks them up at \
    its next look at the queue; 'coven upload-worker --once' sends them now. An upload of a \
    failed move stays failed: stage the changed file afresh, or cancel the move. Prints the ids \
    of the files whose uploads were retried, one a line (--json: an array).
    """
    static let arguments = [ArgumentSpec("FILE", help: "a file whose upload to retry", optional: true, repeating: true, completion: .fileID)]
    static let options: [OptionSpec] = []
    static let mutates = true

    static func run(_ invocation: Invocation, _ context: CommandContext) throws -> Int32 {
        let device = try context.openDevice()
        let files = try Uploads(device).retryUploads(files: invocation.arguments)
        if context.json {
            try context.printJSON(files)
        } else {
            files.forEach(context.line)
        }
        return 0
    }
}
