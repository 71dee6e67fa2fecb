// Renders preview.json (`tts-fleet deploy preview --json`) as a table in the job summary and,
// when `comment` is set, as one pull-request comment per stack, updated in place on each push.
module.exports = async ({ github, context, core, stack, comment }) => {
  const fs = require('fs');
  const marker = `<!-- tts-fleet-preview:${stack} -->`;
  let text;
  try {
    const r = JSON.parse(fs.readFileSync('preview.json', 'utf8'));
    text = r.ok
      ? Object.entries(r.changes).map(([k, v]) => `| ${k} | ${v} |`).join('\n')
      : `| error | ${r.error} |`;
  } catch (e) {
    text = '| error | no summary (see the job log) |';
  }
  const run = `${context.serverUrl}/${context.repo.owner}/${context.repo.repo}/actions/runs/${context.runId}`;
  const body = `${marker}\n### Pulumi preview: \`${stack}\`\n\n| change | count |\n|---|---|\n${text}\n\n[log](${run})`;
  await core.summary.addRaw(body).write();
  if (!comment) {
    return;
  }
  const { owner, repo } = context.repo;
  const issue_number = context.issue.number;
  const comments = await github.paginate(github.rest.issues.listComments, { owner, repo, issue_number });
  const old = comments.find(c => c.body && c.body.startsWith(marker));
  if (old) {
    await github.rest.issues.updateComment({ owner, repo, comment_id: old.id, body });
  } else {
    await github.rest.issues.createComment({ owner, repo, issue_number, body });
  }
};
