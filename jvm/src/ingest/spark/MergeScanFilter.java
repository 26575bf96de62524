package ingest.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.InputFileName;
import org.apache.spark.sql.catalyst.expressions.MonotonicallyIncreasingID;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Lets a Delta MERGE's first pass filter the target's rows in the Parquet reader.
 *
 * <p>The first pass (ClassicMergeExecutor.findTouchedFiles) joins the batch to the target's rows to
 * find the files it touches. It tags each target row with {@code monotonically_increasing_id()} as
 * {@code _row_id_} and {@code input_file_name()} as {@code _file_name_}, both nondeterministic, and
 * Spark pushes no filter below a projection that is not deterministic. So the condition's target-only
 * part (the batch's keys, merge.key_pushdown) stopped above it and the pass read every key of every
 * file, while the later passes read only the pages holding the keys: at 100M rows, about half of the
 * first pass's task time.
 *
 * <p>Below such a projection this rule moves the filter's conjuncts that read only the projection's
 * input, up to the first conjunct that is not deterministic (as Spark's own rules do): the rows that
 * reach the join are the same, and so is each row's file name. The row ids come out different
 * numbers, still unique: Delta uses them only to find a target row that two batch rows match. Other
 * projections are left alone. {@code spark.ingest.mergeScanFilter.enabled} false turns it off for a
 * session.
 */
public final class MergeScanFilter extends Rule<LogicalPlan> {
    public static final String ENABLED = "spark.ingest.mergeScanFilter.enabled";
    static final String ROW_ID = "_row_id_"; // Delta's MergeIntoCommandBase.ROW_ID_COL
    static final String FILE_NAME = "_file_name_"; // and FILE_NAME_COL

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        return Rewrites.up(plan, ENABLED,
                node -> node instanceof Filter f && f.child() instanceof Project p && onlyMergeTags(p),
                node -> pushBelow((Filter) node));
    }

    static LogicalPlan pushBelow(Filter filter) {
        Project tags = (Project) filter.child();
        List<Expression> below = new ArrayList<>(), above = new ArrayList<>();
        boolean pastNondeterministic = false; // as Spark's own pushdown: none from after such a conjunct
        for (Expression e : conjuncts(filter.condition())) {
            pastNondeterministic |= !e.deterministic();
            boolean movable = !pastNondeterministic && e.references().subsetOf(tags.child().outputSet());
            (movable ? below : above).add(e);
        }
        if (below.isEmpty()) {
            return filter;
        }
        LogicalPlan moved = new Project(tags.projectList(), new Filter(and(below), tags.child()));
        return above.isEmpty() ? moved : new Filter(and(above), moved);
    }

    /** A projection whose only nondeterministic columns are a merge's row id and file name. */
    static boolean onlyMergeTags(Project p) {
        boolean tagged = false;
        for (NamedExpression column : CollectionConverters.asJava(p.projectList())) {
            if (((Expression) column).deterministic()) {
                continue;
            }
            if (!(column instanceof Alias a)) {
                return false;
            }
            boolean rowId = a.name().equals(ROW_ID) && a.child() instanceof MonotonicallyIncreasingID;
            boolean fileName = a.name().equals(FILE_NAME) && a.child() instanceof InputFileName;
            if (!rowId && !fileName) {
                return false;
            }
            tagged = true;
        }
        return tagged;
    }

    static List<Expression> conjuncts(Expression e) {
        List<Expression> out = new ArrayList<>();
        if (e instanceof And and) {
            out.addAll(conjuncts(and.left()));
            out.addAll(conjuncts(and.right()));
        } else {
            out.add(e);
        }
        return out;
    }

    static Expression and(List<Expression> conjuncts) {
        Expression out = conjuncts.get(0);
        for (Expression e : conjuncts.subList(1, conjuncts.size())) {
            out = new And(out, e);
        }
        return out;
    }
}
